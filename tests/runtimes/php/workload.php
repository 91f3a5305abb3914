<?php
// Two hot methods in a 75/25 split of this process's CPU time, under a deeper call chain:
//   {main} -> Workload::run -> Workload::step -> Workload::hot_a (3 parts) | Workload::hot_b (1 part)
// Each part burns PART seconds of user+system CPU time (getrusage), so the split holds on a busy
// machine. Prints one JSON line when it starts; runs for $argv[1] seconds (default 60).
const PART = 0.004;

function cpu_seconds(): float {
    $u = getrusage();
    return $u["ru_utime.tv_sec"] + $u["ru_utime.tv_usec"] / 1e6 + $u["ru_stime.tv_sec"] + $u["ru_stime.tv_usec"] / 1e6;
}

class Workload {
    function burn(float $seconds): int {
        $stop = cpu_seconds() + $seconds;
        $x = 0;
        while (cpu_seconds() < $stop) {
            $x++;
        }
        return $x;
    }

    function hot_a(): int {
        return $this->burn(3 * PART);
    }

    function hot_b(): int {
        return $this->burn(PART);
    }

    function step(): void {
        $this->hot_a();
        $this->hot_b();
    }

    function run(float $seconds): void {
        $deadline = hrtime(true) + $seconds * 1e9;
        while (hrtime(true) < $deadline) {
            $this->step();
        }
    }
}

echo json_encode(["pid" => getmypid(), "version" => PHP_VERSION]), "\n";
flush();
(new Workload())->run((float)($argv[1] ?? 60));
