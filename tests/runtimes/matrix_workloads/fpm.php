<?php
// One FastCGI request of the PHP-FPM cell (fpm.sh): rounds of work.php's hot_a three times and hot_b
// once, the order shuffled each round, for about half a second of the worker's CPU; the next request
// follows.
require __DIR__ . '/work.php';

function requested($rounds) {
    $calls = ['hot_a', 'hot_a', 'hot_a', 'hot_b'];
    for ($r = 0; $r < $rounds; $r++) {
        shuffle($calls);
        foreach ($calls as $c) { if ($c === 'hot_a') { hot_a(50000); } else { hot_b(50000); } }
    }
}

requested(100);
echo "done\n";
