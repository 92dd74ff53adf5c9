// Builds the browser artefacts (all gitignored):
//   dist/chanq.js          the client as one ES module (protobufjs bundled in)
//   dist/demo/             the chat-rooms page: index.html, style.css, app.js (one ES module)
//   dist/world/            the spatial world page: index.html, style.css, world.js
// The Node entry point (src/index.js) needs no build beyond the generated descriptors (gen/).
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');

await import('./gen-proto.mjs');

const common = {
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: ['es2020'],
  // Node-only transports (the `ws` package, TCP) are loaded by dynamic import and never run in
  // a browser, which has its own WebSocket.
  external: ['ws', 'node:net'],
  minify: true,
  sourcemap: 'linked',
  legalComments: 'none',
  logLevel: 'warning',
};

rmSync(dist, { recursive: true, force: true });
mkdirSync(join(dist, 'demo'), { recursive: true });
mkdirSync(join(dist, 'world'), { recursive: true });
await esbuild.build({ ...common, entryPoints: [join(root, 'src', 'index.js')], outfile: join(dist, 'chanq.js') });
await esbuild.build({ ...common, entryPoints: [join(root, 'demo', 'app.js')], outfile: join(dist, 'demo', 'app.js') });
await esbuild.build({ ...common, entryPoints: [join(root, 'world', 'world.js')], outfile: join(dist, 'world', 'world.js') });
for (const d of ['demo', 'world']) {
  for (const f of ['index.html', 'style.css'])
    copyFileSync(join(root, d, f), join(dist, d, f));
}
console.log(`built ${join(dist, 'chanq.js')}, ${join(dist, 'demo')}/ and ${join(dist, 'world')}/`);
