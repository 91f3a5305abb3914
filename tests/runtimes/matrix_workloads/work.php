<?php
function hot_a($n) {
    $t = 0;
    for ($i = 0; $i < $n; $i++) { $t = ($t + $i * $i) % 1000003; }
    return $t;
}

function hot_b($n) {
    $t = 0;
    for ($i = 0; $i < $n; $i++) { $t = ($t + $i * $i) % 1000003; }
    return $t;
}

function work() {
    $calls = ['hot_a', 'hot_a', 'hot_a', 'hot_b'];
    $ready = false;
    while (true) {
        shuffle($calls);
        foreach ($calls as $c) { if ($c === 'hot_a') { hot_a(50000); } else { hot_b(50000); } }
        if (!$ready) { echo "ready\n"; fflush(STDOUT); $ready = true; }
    }
}

// (PHP-FPM's requests, fpm.php, run these functions their own way)
if (PHP_SAPI === 'cli') { work(); }
