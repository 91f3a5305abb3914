// Two hot functions, 75/25 of the time: `optimized` (arithmetic: TurboFan-compiled) and `parsing`
// (JSON.parse: a builtin in C++). argv[2]: seconds to run. Prints "ready", and at the end the work done
// per CPU second (bench/node.py compares it with and without a profiler).
const seconds = Number(process.argv[2] || 10);
const text = JSON.stringify({a: [1, 2, 3, {b: "x".repeat(50)}], c: {d: 1.5, e: [true, false, null]}});

let work = 0;

function optimized(ms) {
  const end = Date.now() + ms;
  let x = 0;
  while (Date.now() < end) {
    for (let i = 0; i < 20000; i++) x = (x * 31 + i) % 1000003;
    work++;
  }
  return x;
}

function parsing(ms) {
  const end = Date.now() + ms;
  let n = 0;
  while (Date.now() < end) {
    for (let i = 0; i < 50; i++) n += JSON.parse(text).a.length;
    work++;
  }
  return n;
}

function main() {
  const stop = Date.now() + seconds * 1000;
  console.log("ready");
  while (Date.now() < stop) {
    optimized(30);
    parsing(10);
  }
  const cpu = process.cpuUsage();
  console.log(`work ${work} cpu ${(cpu.user + cpu.system) / 1e6}`);
}
main();
