/* fileio.h - durable file writing and directory helpers shared by the
 * checkpoint, Hugging Face and data modules. Each int function returns 0, or
 * -1 with a message naming the path in err. */
#ifndef LT_FILEIO_H
#define LT_FILEIO_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* mkdir -p (mode 0777 & ~umask); fails when path exists and is not a directory. */
int lt_mkdir_p(const char *path, char *err, size_t errlen);
/* flush, fsync and fclose f, written as `path` (always closes f). */
int lt_file_commit(FILE *f, const char *path, char *err, size_t errlen);
/* fsync a directory, so the entries created or renamed in it survive a crash
 * (a filesystem that cannot sync directories is not an error). */
int lt_fsync_dir(const char *dir, char *err, size_t errlen);
/* rename from to `to`, then fsync to's directory so the rename survives a crash. */
int lt_rename_durable(const char *from, const char *to, char *err, size_t errlen);
/* rm -rf of path; a missing path is success. 0, or -1 with errno set (no message). */
int lt_remove_tree(const char *path);
/* 1 when path is a regular file (symlinks followed), else 0. */
int lt_file_exists(const char *path);

#ifdef __cplusplus
}
#endif

#endif
