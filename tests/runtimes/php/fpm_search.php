<?php
// The PHP-FPM test's `search` script: each request runs
//   {main} -> Finder::dispatch -> handle_search -> spin -> cpu_time
// and burns PART seconds of the worker's CPU time (getrusage), as fpm_app.php does for `report`
// requests, so the handlers' split of samples is the split of requests the test sends (3 to 1).
// fpm_app.php has the same shape line for line under other names: without opcache each request
// compiles its script into memory the previous request freed, so the two scripts' functions take
// each other's addresses, and a frame named from whatever sits at its address now would be wrong.
const PART = 0.008;

function cpu_time(): float {
    $u = getrusage();
    return $u["ru_utime.tv_sec"] + $u["ru_utime.tv_usec"] / 1e6 + $u["ru_stime.tv_sec"] + $u["ru_stime.tv_usec"] / 1e6;
}

function spin(float $seconds): int {
    $stop = cpu_time() + $seconds;
    $x = 0;
    while (cpu_time() < $stop) {
        $x++;
    }
    return $x;
}

function handle_search(): int {
    return spin(PART);
}

class Finder {
    static function dispatch(string $route): int {
        if ($route === "search") {
            return handle_search();
        }
        http_response_code(404);
        return 0;
    }
}

$route = $_GET["route"] ?? "";
$n = Finder::dispatch($route);
header("Content-Type: application/json");
echo json_encode(["pid" => getmypid(), "file" => __FILE__, "route" => $route, "n" => $n, "sapi" => PHP_SAPI,
                  "opcache" => function_exists("opcache_get_status") && (opcache_get_status(false)["opcache_enabled"] ?? false),
                  "cached" => function_exists("opcache_is_script_cached") && opcache_is_script_cached(__FILE__)]);
