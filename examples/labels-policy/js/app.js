// labels-policy in JavaScript: the same policy as ../rust and ../python (see ../README.md).
import { exportPolicy, pattern, Response, Violations } from './wasm-apiserver-sdk.js';

export const admission = exportPolicy({
  config: { labels: [], denyNamePattern: pattern(), defaultAnnotations: {} },

  validate(config, req) {
    const [v, name] = [new Violations(), req.name];
    if (config.denyNamePattern?.isMatch(name)) {
      v.forbidden('metadata.name', `name matches the forbidden pattern ${JSON.stringify(config.denyNamePattern.source)}`);
    }
    const missing = req.missingLabels(config.labels).join(', ');
    if (missing) v.required('metadata.labels', `missing required label(s): ${missing}`);
    return v.intoResponse(`${req.kind} ${JSON.stringify(name)} denied`).when(!req.isDelete);
  },

  mutate(config, req) {
    const patch = req.patch().defaultAnnotations(config.defaultAnnotations);
    return Response.patched(patch).when(req.isCreate);
  },
});
