function rec(n) { if (n === 0) { let x = 0; for (let i = 0; i < 1e5; i++) x += i; return x; } return rec(n - 1) + 1; }
const d = Number(process.argv[2]); let t = 0; for (;;) t += rec(d);
