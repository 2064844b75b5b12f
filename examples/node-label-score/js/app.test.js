// The shared case table (tests/fixtures/plugin-cases/node-label-score.yaml)
// run natively on the JavaScript plugin, in plain Node with the SDK staged
// beside app.js as the build stages it; python3 with PyYAML reads the YAML:
//   node --test examples/node-label-score/js/
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..', '..');
const table = JSON.parse(execFileSync('python3', ['-c',
  'import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)',
  join(root, 'tests', 'fixtures', 'plugin-cases', 'node-label-score.yaml')], { encoding: 'utf8' }));

// app.js imports './wasm-apiserver-scheduler-sdk.js': stage the three files.
const stage = mkdtempSync(join(tmpdir(), 'node-label-score-js-'));
for (const [dir, file] of [[here, 'app.js'], [join(root, 'plugins', 'sdk-js'), 'wasm-apiserver-sdk.js'],
  [join(root, 'plugins', 'sdk-js'), 'wasm-apiserver-scheduler-sdk.js']]) {
  copyFileSync(join(dir, file), join(stage, file));
}
const { plugin, scheduler } = await import(join(stage, 'app.js'));
const sdk = await import(join(stage, 'wasm-apiserver-scheduler-sdk.js'));
rmSync(stage, { recursive: true, force: true });

for (const c of table.cases) {
  test(`case: ${c.name}`, () => {
    assert.deepEqual(sdk.checkCase(plugin, table, c), []);
  });
}

test('it claims filter and score only, and no node objects', () => {
  assert.deepEqual(scheduler.extensionPoints(''),
    { preFilter: false, filter: true, preScore: false, score: true, normalizeScore: false, nodeObjects: false });
});

test('check-config wants an object with a string label', () => {
  scheduler.checkConfig('{"label": "score", "avoidLabel": "avoid"}');
  scheduler.checkConfig('{"label": "score"}');
  for (const bad of ['', '{}', '[]', '5', '{"label": 5}', '{"label": "s", "avoidLabel": true}']) {
    assert.throws(() => scheduler.checkConfig(bad), (e) => typeof e === 'string', bad);
  }
});

test('the export speaks the bindings: packed nodes in, s64 scores as BigInt, refusals as records', () => {
  // As the host packs them: one UTF-8 text, the labels as spans of it, each node as spans.
  const nodes = sdk.pack([
    { kind: 'Node', metadata: { name: 'a', labels: { score: '80' } } },
    { kind: 'Node', metadata: { name: 'b', labels: { score: '1', avoid: 'true' } } },
  ]);
  const config = '{"label": "score", "avoidLabel": "avoid"}';
  const pod = JSON.stringify(sdk.DEFAULT_POD);
  assert.deepEqual(scheduler.filter(config, '', pod, nodes),
    [undefined, { code: 'unschedulable-and-unresolvable', reasons: ['node has label avoid=true'] }]);
  assert.deepEqual(scheduler.score(config, '', pod, nodes), [80n, 1n]);
});
