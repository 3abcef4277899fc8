#!/bin/sh
# cuebench-restore.sh BACKUP STUDY: put a backup's responses back (docs/deploy.md), with the server stopped.
# BACKUP is a responses-STAMP.dump (restored into $CUEBENCH_DATABASE, replacing its tables) or a
# responses-STAMP.sqlite (copied to STUDY/responses.sqlite; the file it replaces is kept beside it).
set -eu
backup=${1:?usage: cuebench-restore.sh BACKUP STUDY}
study=${2:?usage: cuebench-restore.sh BACKUP STUDY}
study=${study%/}
case "$backup" in
    *.dump)
        : "${CUEBENCH_DATABASE:?set CUEBENCH_DATABASE to the database to restore into}"
        pg_restore --clean --if-exists --no-owner --single-transaction --dbname="$CUEBENCH_DATABASE" "$backup" ;;
    *.sqlite)
        umask 077
        for old in "$study/responses.sqlite" "$study/responses.sqlite-wal" "$study/responses.sqlite-shm"; do
            [ ! -e "$old" ] || mv "$old" "$old.before-restore"
        done
        cp "$backup" "$study/responses.sqlite" ;;
    *) echo "cuebench-restore.sh: $backup is neither a .dump nor a .sqlite backup" >&2; exit 2 ;;
esac
