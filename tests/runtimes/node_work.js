// Two hot functions, 75/25 of the time: `optimized` (arithmetic: TurboFan-compiled) and `parsing`
// (JSON.parse: a builtin in C++). argv[2]: seconds to run. Prints "ready", and at the end the work done
// per CPU second (bench/node.py compares it with and without a profiler) and the process's user CPU
// time spent in each hot function (tests/runtimes: a ground truth where V8's own profiler is off).
const seconds = Number(process.argv[2] || 10);
const text = JSON.stringify({a: [1, 2, 3, {b: "x".repeat(50)}], c: {d: 1.5, e: [true, false, null]}});

let work = 0;
let cpuOptimized = 0, cpuParsing = 0;

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
    const c0 = process.cpuUsage().user;
    optimized(30);
    const c1 = process.cpuUsage().user;
    parsing(10);
    cpuOptimized += c1 - c0;
    cpuParsing += process.cpuUsage().user - c1;
  }
  const cpu = process.cpuUsage();
  console.log(`work ${work} cpu ${(cpu.user + cpu.system) / 1e6}`);
  console.log(`user_cpu_us optimized ${cpuOptimized} parsing ${cpuParsing}`);
}
main();
