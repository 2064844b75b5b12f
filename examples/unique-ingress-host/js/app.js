// unique-ingress-host in JavaScript (see ../README.md): the policy in
// logic.js, its `cluster` calls sent to the component's import.
import * as clusterImport from 'wasm-apiserver:plugin/cluster@0.4.0';
import * as sdk from './wasm-apiserver-sdk.js';
import { uniqueIngressHost } from './logic.js';

export const admission = sdk.exportPolicy(uniqueIngressHost(sdk), { cluster: clusterImport });
