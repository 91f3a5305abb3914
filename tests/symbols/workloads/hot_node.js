// A JIT-compiled JavaScript function burns the CPU: its name comes from the perf map.
function crunchInJavaScript(n) {
  let s = 0;
  for (let i = 0; i < n; i++) s = (s * 31 + i) % 1000003;
  return s;
}
let sink = 0;
for (;;) sink += crunchInJavaScript(1e7);
