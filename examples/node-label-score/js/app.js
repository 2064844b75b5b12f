// node-label-score in JavaScript: the same scheduler plugin as ../rust and ../python (see ../README.md).
import { clampScore, exportScheduler, parseInteger, Refusal } from './wasm-apiserver-scheduler-sdk.js';

export const plugin = {
  config: { label: '', avoidLabel: '' },

  check(config) {
    if (!config.label) throw new Error('invalid configuration: label must be a non-empty string');
  },

  filter(config, pod, node) {
    if (config.avoidLabel && node.label(config.avoidLabel) === 'true') {
      return Refusal.unschedulableAndUnresolvable(`node has label ${config.avoidLabel}=true`);
    }
    return undefined;
  },

  score(config, pod, node) {
    return clampScore(parseInteger(node.label(config.label)) ?? 0);
  },
};

export const scheduler = exportScheduler(plugin);
