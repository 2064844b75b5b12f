// namespace-defaults in JavaScript: the same controller as
// plugins/namespace-defaults (Rust) and ../python, on the JavaScript
// controller SDK; see ../README.md.
import * as cluster from 'wasm-apiserver:plugin/cluster@0.4.0';
import * as writes from 'wasm-apiserver:plugin/writes@0.4.0';
import * as events from 'wasm-apiserver:plugin/events@0.4.0';
import { exportController, witHost } from './wasm-apiserver-controller-sdk.js';
import { namespaceDefaults } from './logic.js';

export const controller = exportController(namespaceDefaults, witHost({ cluster, writes, events }));
