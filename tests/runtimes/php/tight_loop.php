<?php
// A tight arithmetic loop: while it runs, the VM neither calls nor meets anything that may throw, so
// PHP keeps the current opline in a register and never stores it in the frame. spin() runs its loop
// over and over for $argv[1] seconds (default 60); prints one JSON line when it starts.

function spin(int $n): int {
    $t = 0;
    for ($i = 0; $i < $n; $i++) {
        $t = ($t + $i * $i) % 1000003;
    }
    return $t;
}

function main(float $seconds): void {
    $deadline = hrtime(true) + $seconds * 1e9;
    while (hrtime(true) < $deadline) {
        spin(2000000);
    }
}

echo json_encode(["pid" => getmypid(), "version" => PHP_VERSION]), "\n";
flush();
main((float)($argv[1] ?? 60));
