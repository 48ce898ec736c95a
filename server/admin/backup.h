/* backup.h - psdbd backup and restore: a consistent copy of a data directory, and back. */
#ifndef PSDBD_BACKUP_H
#define PSDBD_BACKUP_H

/* `psdbd backup --data-dir DIR --out BACKUPDIR [--copy]`: copies the index with SQLite's online
 * backup API (one read snapshot, so a running server keeps publishing meanwhile), then every blob
 * that snapshot names, hard-linked when BACKUPDIR is on the same filesystem (blobs are immutable)
 * and copied otherwise or with --copy, each checked against its indexed size. BACKUPDIR/backup.json
 * is written last: a backup without it is incomplete. argv[0] is "backup"; returns the exit
 * status (0 done, 1 failed, 2 bad arguments). */
int psdbd_cmd_backup(int argc, char **argv);

/* `psdbd restore --from BACKUPDIR --data-dir NEWDIR [--copy]`: refuses a NEWDIR that exists and is
 * not an empty directory; copies the index back (SQLite backup API), links or copies every indexed
 * blob, checks sizes, and opens the result with psdbd's own migrations. argv[0] is "restore";
 * returns the exit status like psdbd_cmd_backup. */
int psdbd_cmd_restore(int argc, char **argv);

#endif
