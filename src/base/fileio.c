/* fileio.c - durable writes and directory helpers (see fileio.h). */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

int lt_mkdir_p(const char *path, char *err, size_t errlen) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return lt_errorf(err, errlen, "path too long: %s", path);
    /* Create each prefix ending before a '/', then the whole path. */
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return lt_errorf(err, errlen, "cannot create directory %s: %s", buf, strerror(errno));
        *p = saved;
        if (saved == '\0') break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return lt_errorf(err, errlen, "%s exists and is not a directory", path);
    return 0;
}

int lt_file_commit(FILE *f, const char *path, char *err, size_t errlen) {
    int rc = 0;
    if (ferror(f))
        rc = lt_errorf(err, errlen, "error writing %s: %s", path, strerror(errno));
    else if (fflush(f) != 0)
        rc = lt_errorf(err, errlen, "error writing %s: %s", path, strerror(errno));
    else if (fsync(fileno(f)) != 0)
        rc = lt_errorf(err, errlen, "cannot sync %s: %s", path, strerror(errno));
    if (fclose(f) != 0 && rc == 0)
        rc = lt_errorf(err, errlen, "error closing %s: %s", path, strerror(errno));
    return rc;
}

int lt_fsync_dir(const char *dir, char *err, size_t errlen) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return lt_errorf(err, errlen, "cannot open directory %s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* Some filesystems cannot fsync directories; that is not a write failure. */
    if (rc != 0 && e != EINVAL && e != ENOTSUP)
        return lt_errorf(err, errlen, "cannot sync directory %s: %s", dir, strerror(e));
    return 0;
}

/* Directory part of path ("." when none) into out[PATH_MAX]. */
static void dir_of(const char *path, char out[PATH_MAX]) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, PATH_MAX, ".");
    else if (slash == path) snprintf(out, PATH_MAX, "/");
    else snprintf(out, PATH_MAX, "%.*s", (int)(slash - path), path);
}

int lt_rename_durable(const char *from, const char *to, char *err, size_t errlen) {
    if (rename(from, to) != 0)
        return lt_errorf(err, errlen, "cannot rename %s to %s: %s", from, to, strerror(errno));
    char dir[PATH_MAX];
    dir_of(to, dir);
    return lt_fsync_dir(dir, err, errlen);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

int lt_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int lt_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
