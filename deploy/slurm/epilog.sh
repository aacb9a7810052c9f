#!/bin/sh
# Slurm epilog: store tessera's verdict of the job that just ended on this node, as JSON
# (`tessera job`, docs/jobs.md), in $TESSERA_JOB_DIR/<job id>.json.
#
# Install on every GPU node (slurm.conf: Epilog=/etc/slurm/epilog.d/tessera.sh, or one line of
# an existing epilog). slurmd runs it as root after each job with SLURM_JOB_ID set. It reads the
# node's own tessera history (the exporter's --history.dir) unless TESSERA_SOURCE names another
# source, e.g. prometheus:http://prometheus:9090 for multi-node jobs.
#
# It never fails the epilog: a failing epilog drains the node. Errors go to slurmd's log
# (stderr), and a partly written summary is removed on every path (a signal included). It never
# blocks the node either: `tessera job` gets TESSERA_JOB_TIMEOUT seconds (default 60; then
# SIGTERM, and SIGKILL 5 s later), far below slurm.conf's EpilogMsgTime/PrologEpilogTimeout
# defaults, whatever the source does (a hung NFS mount, a FIFO, a silent Prometheus).

TESSERA=${TESSERA:-tessera}
SOURCE=${TESSERA_SOURCE:-history:/var/lib/tessera/history}
DIR=${TESSERA_JOB_DIR:-/var/lib/tessera/jobs}
SINCE=${TESSERA_JOB_SINCE:-30d}
TIMEOUT=${TESSERA_JOB_TIMEOUT:-60}
case "$TIMEOUT" in
  '' | *[!0-9]*) TIMEOUT=60 ;;
esac

job=${SLURM_JOB_ID:-}
case "$job" in
  '' | *[!0-9_]*)
    echo "tessera epilog: SLURM_JOB_ID is not a job id: '$job'" >&2
    exit 0
    ;;
esac

mkdir -p "$DIR" || exit 0
tmp="$DIR/.$job.json.tmp"
trap 'rm -f "$tmp"' EXIT
trap 'exit 0' HUP INT TERM
timeout -k 5 "$TIMEOUT" "$TESSERA" job "$job" --source "$SOURCE" --since "$SINCE" --format json >"$tmp"
rc=$?
if [ "$rc" -eq 0 ]; then
  mv -f "$tmp" "$DIR/$job.json"
elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "tessera epilog: no summary for job $job: tessera job did not finish in ${TIMEOUT}s (TESSERA_JOB_TIMEOUT); source $SOURCE" >&2
else
  echo "tessera epilog: no summary for job $job (see the message above)" >&2
fi
exit 0
