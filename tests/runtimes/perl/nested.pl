#!/usr/bin/perl
# Perl code that C code calls back into, and evals: a sort comparator sub (run by pp_sort in a
# runloop of its own), inside an eval block, under a sub, for $ARGV[0] seconds (default 60):
#   <main> -> Nested::outer -> (eval) -> Nested::sorter -> [pp_sort, C] -> Nested::by_value
# Prints one JSON line when it starts.
package Nested;
use strict;
use warnings;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);

our @values = map { ($_ * 7919) % 10007 } 1 .. 2000;

sub by_value {
    my $x = 0;
    $x += $_ for 1 .. 20;
    return $Nested::values[$a] <=> $Nested::values[$b];
}

sub sorter {
    my @order = sort by_value 0 .. $#Nested::values;
    return $order[0];
}

sub outer {
    my ($seconds) = @_;
    my $deadline = clock_gettime(CLOCK_MONOTONIC) + $seconds;
    while (clock_gettime(CLOCK_MONOTONIC) < $deadline) {
        eval { sorter(); 1 } or die $@;
    }
}

package main;
$| = 1;
printf "{\"pid\": %d}\n", $$;
Nested::outer($ARGV[0] // 60);
