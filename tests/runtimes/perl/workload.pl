#!/usr/bin/perl
# Two hot subs in a 75/25 split of this process's CPU time, under a deeper call chain:
#   <main> -> Workload::run -> Workload::step -> Workload::hot_a (3 parts) | Workload::hot_b (1 part)
#   and each -> Workload::burn -> Workload::cpu_seconds
# Each part burns PART seconds of this process's CPU time (CLOCK_PROCESS_CPUTIME_ID), so the split
# holds on a busy machine. Prints one JSON line when it starts; runs for $ARGV[0] seconds (default 60).
package Workload;
use strict;
use warnings;
use Time::HiRes qw(clock_gettime CLOCK_PROCESS_CPUTIME_ID CLOCK_MONOTONIC);

use constant PART => 0.004;

sub cpu_seconds {
    return clock_gettime(CLOCK_PROCESS_CPUTIME_ID);
}

sub burn {
    my ($seconds) = @_;
    my $stop = cpu_seconds() + $seconds;
    my $x = 0;
    while (cpu_seconds() < $stop) {
        $x++;
    }
    return $x;
}

sub hot_a {
    return burn(3 * PART);
}

sub hot_b {
    return burn(PART);
}

sub step {
    hot_a();
    hot_b();
}

sub run {
    my ($seconds) = @_;
    my $deadline = clock_gettime(CLOCK_MONOTONIC) + $seconds;
    while (clock_gettime(CLOCK_MONOTONIC) < $deadline) {
        step();
    }
}

package main;
$| = 1;
printf "{\"pid\": %d, \"version\": \"%vd\"}\n", $$, $^V;
Workload::run($ARGV[0] // 60);
