#!/bin/sh
# cuebench-backup.sh STUDY BACKUPS: a consistent copy of a study while it is served (docs/deploy.md).
# The responses and server tables: pg_dump of $CUEBENCH_DATABASE, else SQLite's online backup of
# STUDY/responses.sqlite; the folder (experiment.json, rules.json, texts/, stimuli/) as a tar file;
# the secrets file ($CUEBENCH_SECRETS, else STUDY.secrets.json beside the folder). Every file is
# readable by its owner only: it holds participants' data. Backups older than
# $CUEBENCH_BACKUP_DAYS days (default 30) are deleted.
set -eu
study=${1:?usage: cuebench-backup.sh STUDY BACKUPS}
into=${2:?usage: cuebench-backup.sh STUDY BACKUPS}
study=${study%/}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
umask 077
mkdir -p "$into"
if [ -n "${CUEBENCH_DATABASE:-}" ]; then
    pg_dump --format=custom --file="$into/responses-$stamp.dump" "$CUEBENCH_DATABASE"
else
    python3 - "$study/responses.sqlite" "$into/responses-$stamp.sqlite" <<'PY'
import sqlite3, sys
source, copy = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
source.backup(copy)  # one consistent snapshot, taken while the server goes on writing
copy.close()
PY
fi
tar -czf "$into/study-$stamp.tar.gz" --exclude='responses.sqlite*' -C "$(dirname "$study")" "$(basename "$study")"
secrets=${CUEBENCH_SECRETS:-$study.secrets.json}
[ ! -f "$secrets" ] || cp -p "$secrets" "$into/secrets-$stamp.json"
find "$into" -maxdepth 1 -name '*-2*' -mtime "+${CUEBENCH_BACKUP_DAYS:-30}" -delete
echo "$into/responses-$stamp.*"
