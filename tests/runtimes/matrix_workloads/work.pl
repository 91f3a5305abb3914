use strict;
use warnings;
use List::Util qw(shuffle);
$| = 1;

sub hot_a {
    my ($n) = @_;
    my $t = 0;
    for my $i (0 .. $n - 1) { $t = ($t + $i * $i) % 1000003; }
    return $t;
}

sub hot_b {
    my ($n) = @_;
    my $t = 0;
    for my $i (0 .. $n - 1) { $t = ($t + $i * $i) % 1000003; }
    return $t;
}

sub work {
    my $ready = 0;
    while (1) {
        for my $c (shuffle('a', 'a', 'a', 'b')) { $c eq 'a' ? hot_a(20000) : hot_b(20000); }
        if (!$ready) { print "ready\n"; $ready = 1; }
    }
}

work();
