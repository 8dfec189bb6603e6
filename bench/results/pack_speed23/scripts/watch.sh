#!/bin/bash
# usage: watch.sh LOG : waits for INGESTED <pid> in LOG, turns instrumentation on, releases the process
log=$1
until grep -q INGESTED "$log" 2>/dev/null; do sleep 1; done
pid=$(grep INGESTED "$log" | awk '{print $2}')
callgrind_control -i on $pid > /dev/null
touch /tmp/speed23/go-$pid
