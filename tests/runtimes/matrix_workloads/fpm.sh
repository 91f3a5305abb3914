#!/bin/sh
# The PHP-FPM cell's workload: the suite's php-fpm (a master and one worker of a static pool, on a
# socket in a directory of its own) and a loop of FastCGI requests to it (libfcgi-bin's cgi-fcgi), each
# running fpm.php. Prints "ready" after the first answer; the matrix profiles the worker
# ("php-fpm: pool hsm").
set -eu
dir=$(mktemp -d)
fpm=$(ls /usr/sbin/php-fpm* | head -n 1)
cat >"$dir/fpm.conf" <<CONF
[global]
error_log = $dir/fpm.log
daemonize = no
[hsm]
listen = $dir/fpm.sock
user = nobody
group = nogroup
pm = static
pm.max_children = 1
CONF
"$fpm" --nodaemonize --fpm-config "$dir/fpm.conf" &
tries=0
until [ -S "$dir/fpm.sock" ]; do
    tries=$((tries + 1))
    [ "$tries" -lt 300 ] || { echo "no socket from $fpm" >&2; cat "$dir/fpm.log" >&2; exit 1; }
    sleep 0.1
done
export SCRIPT_FILENAME="$PWD/fpm.php" REQUEST_METHOD=GET
ready=
while :; do
    out=$(cgi-fcgi -bind -connect "$dir/fpm.sock")
    case $out in *done*) ;; *) echo "no answer from the worker: $out" >&2; exit 1 ;; esac
    [ -n "$ready" ] || { echo ready; ready=1; }
done
