/*
 * powerloss_shim: an LD_PRELOAD library that keeps, beside a directory tree, what the
 * process has asked the kernel to make durable there -- so that a test can kill the
 * process and rebuild the tree from exactly that, as a power loss would leave it
 * (tools/powerloss.py applies it after a SIGKILL).
 *
 * The model, per inode (content follows the inode, not the name):
 *   - a regular file's bytes and length are durable as of its last successful fsync or
 *     fdatasync (any fd of it, including one opened O_WRONLY), or, for the range it names,
 *     of an msync(MS_SYNC) of a shared writable mapping of it (Linux implements msync as
 *     an fdatasync of the range, which also makes the length durable);
 *   - a directory's entries (name -> inode) are durable as of the directory's last fsync:
 *     a create, rename or unlink not followed by an fsync of the directory is undone --
 *     a file renamed over another comes back under its old name with its old inode's
 *     durable bytes, an unlinked file comes back, a renamed directory goes back;
 *   - a file whose entry is durable but whose bytes were never synced comes back empty;
 *     a directory whose entry is durable but which was never fsynced comes back empty;
 *   - an inode freed (last link removed) and reused by a new file gets a new generation,
 *     so the old name's durable bytes are not confused with the new file's.
 * What a real power loss can do that this does not (the shim is stricter than ext4 in
 * what it drops, and never looser in what it keeps):
 *   - keep some unsynced bytes (pages the kernel wrote back on its own), or tear a sector
 *     or page in the middle of an unsynced range, or reorder writes inside it: here every
 *     unsynced byte is lost and synced ones are whole;
 *   - make an entry durable without an fsync of its directory (ext4's journal commits
 *     metadata every few seconds, and orders data before it): here it is undone;
 *   - lose bytes that were fsynced when the disk lies about its cache flush: not modelled;
 *   - sync_file_range() is not a durability call (it flushes neither metadata nor the
 *     disk's cache) and O_SYNC/O_DSYNC writes are not recognised: tern uses neither.
 *   - a directory moved between two parents of which only one was fsynced may appear
 *     under both or neither names; powerloss.py keeps the first it meets.
 *
 * Environment: TERN_POWERLOSS_ROOT (the tree to watch), TERN_POWERLOSS_SHADOW (where the
 * durable state is kept: root = the key of the root directory, ino/<key> durable bytes,
 * dirs/<key> durable listings "kind TAB key TAB name"; key = "<inode>.<generation>").
 * At load, the tree as it is counts as durable (it survived whatever came before).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_MAPS 8192
#define MAX_RANGES 4096
#define MAX_DIRTY 1024
#define GEN_SLOTS (1 << 16)

static char root[PATH_MAX];
static size_t root_len;
static char shadow[PATH_MAX];
static int enabled;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

struct range { off_t start, end; };
/* Ranges written since the last sync of an inode; `overflow` (too many ranges, or the
 * bytes changed by a truncate or fallocate) makes the next sync copy the whole file. */
struct dirty { ino_t ino; int used; size_t n; int overflow; struct range r[MAX_RANGES]; };
static struct dirty *dirty_table;

/* A writable shared mapping, with a read-only fd of its file of our own (so that an
 * msync still reads the right inode after the file was renamed or unlinked). */
struct map { void *addr; size_t len; off_t offset; ino_t ino; int rfd; };
static struct map maps[MAX_MAPS];

/* Generation of each inode whose last link was removed at least once (open addressing). */
struct gen { ino_t ino; unsigned gen; };
static struct gen *gens;

static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_msync)(void *, size_t, int);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_fallocate64)(int, int, off_t, off_t);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_rmdir)(const char *);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned);

static void resolve(void) {
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_write = dlsym(RTLD_NEXT, "write");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_msync = dlsym(RTLD_NEXT, "msync");
    real_mmap = dlsym(RTLD_NEXT, "mmap");
    real_mmap64 = dlsym(RTLD_NEXT, "mmap64");
    real_munmap = dlsym(RTLD_NEXT, "munmap");
    real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
    real_fallocate = dlsym(RTLD_NEXT, "fallocate");
    real_fallocate64 = dlsym(RTLD_NEXT, "fallocate64");
    real_unlink = dlsym(RTLD_NEXT, "unlink");
    real_unlinkat = dlsym(RTLD_NEXT, "unlinkat");
    real_rmdir = dlsym(RTLD_NEXT, "rmdir");
    real_rename = dlsym(RTLD_NEXT, "rename");
    real_renameat = dlsym(RTLD_NEXT, "renameat");
    real_renameat2 = dlsym(RTLD_NEXT, "renameat2");
}

#define REAL(name) (real_##name ? real_##name : (resolve(), real_##name))

/* ---- generations ---------------------------------------------------------------- */

static struct gen *gen_slot(ino_t ino, int create) {
    if (!gens) return NULL;
    for (size_t i = 0, h = (size_t)(ino * 2654435761u) % GEN_SLOTS; i < GEN_SLOTS; i++, h = (h + 1) % GEN_SLOTS) {
        if (gens[h].ino == ino) return &gens[h];
        if (gens[h].ino == 0) {
            if (!create) return NULL;
            gens[h].ino = ino;
            return &gens[h];
        }
    }
    return NULL;
}

static unsigned gen_of(ino_t ino) {
    struct gen *g = gen_slot(ino, 0);
    return g ? g->gen : 0;
}

static void key_of(ino_t ino, char *out, size_t size) {
    snprintf(out, size, "%lu.%u", (unsigned long)ino, gen_of(ino));
}

/* ---- paths ---------------------------------------------------------------------- */

static int under_root(const char *path) {
    return strncmp(path, root, root_len) == 0 && (path[root_len] == 0 || path[root_len] == '/');
}

/* The path of an open fd if it lies under the root. */
static int fd_path(int fd, char *out) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n <= 0) return 0;
    out[n] = 0;
    return under_root(out);
}

/* A new read-only fd of the file `fd` is open on (works for O_WRONLY fds, renamed and
 * unlinked files alike). */
static int reopen_ro(int fd) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    return open(link, O_RDONLY | O_CLOEXEC);
}

/* ---- the shadow ----------------------------------------------------------------- */

/* Copies [start, end) of `src_fd` into the shadow of `key`, creating it, and sets the
 * shadow's length to `size` when size >= 0. */
static void copy_range(int src_fd, const char *key, off_t start, off_t end, off_t size) {
    char dst[PATH_MAX];
    snprintf(dst, sizeof dst, "%s/ino/%s", shadow, key);
    int out = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (out < 0) return;
    static char buf[1 << 16]; /* under `lock` */
    for (off_t at = start; at < end;) {
        size_t want = (size_t)(end - at) < sizeof buf ? (size_t)(end - at) : sizeof buf;
        ssize_t n = pread(src_fd, buf, want, at);
        if (n <= 0) break;
        REAL(pwrite64)(out, buf, (size_t)n, at);
        at += n;
    }
    if (size >= 0) REAL(ftruncate)(out, size);
    close(out);
}

static int shadow_exists(const char *key) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/ino/%s", shadow, key);
    return access(p, F_OK) == 0;
}

static struct dirty *dirty_for(ino_t ino, int create) {
    for (int i = 0; i < MAX_DIRTY; i++)
        if (dirty_table[i].used && dirty_table[i].ino == ino) return &dirty_table[i];
    if (!create) return NULL;
    for (int i = 0; i < MAX_DIRTY; i++)
        if (!dirty_table[i].used) {
            dirty_table[i].used = 1;
            dirty_table[i].ino = ino;
            dirty_table[i].n = 0;
            dirty_table[i].overflow = 0;
            return &dirty_table[i];
        }
    return NULL; /* untracked: the next sync copies the whole file */
}

static void note_write(int fd, off_t start, ssize_t len) {
    if (!enabled || len <= 0) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
    char path[PATH_MAX];
    if (!fd_path(fd, path)) return;
    pthread_mutex_lock(&lock);
    struct dirty *d = dirty_for(st.st_ino, 1);
    if (d) {
        if (d->n < MAX_RANGES) d->r[d->n++] = (struct range){start, start + len};
        else d->overflow = 1;
    }
    pthread_mutex_unlock(&lock);
}

/* The bytes of `fd`'s file changed in a way the ranges do not tell (truncate, fallocate). */
static void note_reshape(int fd) {
    if (!enabled) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
    char path[PATH_MAX];
    if (!fd_path(fd, path)) return;
    pthread_mutex_lock(&lock);
    struct dirty *d = dirty_for(st.st_ino, 1);
    if (d) d->overflow = 1;
    pthread_mutex_unlock(&lock);
}

/* Records the entries of directory `dir` as its durable listing. */
static void sync_dir(const char *dir, ino_t dir_ino) {
    char key[64], out_path[PATH_MAX], tmp[PATH_MAX + 8];
    key_of(dir_ino, key, sizeof key);
    snprintf(out_path, sizeof out_path, "%s/dirs/%s", shadow, key);
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            struct stat st;
            if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
            if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) continue;
            char child[64];
            key_of(st.st_ino, child, sizeof child);
            fprintf(f, "%c\t%s\t%s\n", S_ISDIR(st.st_mode) ? 'd' : 'f', child, e->d_name);
        }
        closedir(d);
    }
    fclose(f);
    REAL(rename)(tmp, out_path); /* not ours: `lock` is held */
}

/* fsync/fdatasync succeeded: the file's written ranges (or all of it) become durable;
 * for a directory, its entries. */
static void sync_fd(int fd) {
    if (!enabled) return;
    char path[PATH_MAX];
    if (!fd_path(fd, path)) return;
    struct stat st;
    if (fstat(fd, &st) != 0) return;
    pthread_mutex_lock(&lock);
    if (S_ISDIR(st.st_mode)) {
        sync_dir(path, st.st_ino);
    } else if (S_ISREG(st.st_mode)) {
        int src = reopen_ro(fd);
        if (src >= 0) {
            char key[64];
            key_of(st.st_ino, key, sizeof key);
            struct dirty *d = dirty_for(st.st_ino, 0);
            /* An fsync also writes back stores through a shared mapping: all of it. */
            int mapped = 0;
            for (int i = 0; i < MAX_MAPS; i++)
                if (maps[i].addr && maps[i].ino == st.st_ino) mapped = 1;
            if (mapped || !shadow_exists(key) || !d || d->overflow) {
                copy_range(src, key, 0, st.st_size, st.st_size);
            } else {
                for (size_t i = 0; i < d->n; i++) {
                    off_t end = d->r[i].end < st.st_size ? d->r[i].end : st.st_size;
                    if (d->r[i].start < end) copy_range(src, key, d->r[i].start, end, -1);
                }
                copy_range(src, key, 0, 0, st.st_size);
            }
            if (d) d->used = 0;
            close(src);
        }
    }
    pthread_mutex_unlock(&lock);
}

/* The inode at (dirfd, name) is about to lose a link: if it is its last (or a
 * directory), a later inode with the same number is another file. Returns the inode to
 * retire after the call succeeds, or 0. */
static ino_t doomed(int dirfd, const char *name) {
    if (!enabled) return 0;
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    if (S_ISDIR(st.st_mode) || st.st_nlink <= 1) return st.st_ino;
    return 0;
}

static void retire(ino_t ino) {
    if (!ino) return;
    pthread_mutex_lock(&lock);
    struct gen *g = gen_slot(ino, 1);
    if (g) g->gen++;
    struct dirty *d = dirty_for(ino, 0);
    if (d) d->used = 0;
    pthread_mutex_unlock(&lock);
}

static void baseline(const char *dir) {
    struct stat dst;
    if (lstat(dir, &dst) != 0) return;
    sync_dir(dir, dst.st_ino);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char child[PATH_MAX];
        snprintf(child, sizeof child, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(child, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            baseline(child);
        } else if (S_ISREG(st.st_mode)) {
            int src = open(child, O_RDONLY | O_CLOEXEC);
            if (src >= 0) {
                char key[64];
                key_of(st.st_ino, key, sizeof key);
                copy_range(src, key, 0, st.st_size, st.st_size);
                close(src);
            }
        }
    }
    closedir(d);
}

__attribute__((constructor)) static void init(void) {
    resolve();
    const char *r = getenv("TERN_POWERLOSS_ROOT");
    const char *s = getenv("TERN_POWERLOSS_SHADOW");
    if (!r || !s || !*r || !*s) return;
    if (!realpath(r, root)) {
        mkdir(r, 0755);
        if (!realpath(r, root)) return;
    }
    root_len = strlen(root);
    snprintf(shadow, sizeof shadow, "%s", s);
    char p[PATH_MAX];
    mkdir(shadow, 0755);
    snprintf(p, sizeof p, "%s/ino", shadow);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/dirs", shadow);
    mkdir(p, 0755);
    dirty_table = calloc(MAX_DIRTY, sizeof *dirty_table);
    gens = calloc(GEN_SLOTS, sizeof *gens);
    if (!dirty_table || !gens) return;
    /* Everything now in the tree counts as durable. */
    struct stat st;
    if (stat(root, &st) != 0) return;
    snprintf(p, sizeof p, "%s/root", shadow);
    FILE *f = fopen(p, "w");
    if (!f) return;
    fprintf(f, "%lu.0\n", (unsigned long)st.st_ino);
    fclose(f);
    baseline(root);
    enabled = 1;
}

/* ---- writes --------------------------------------------------------------------- */

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t offset) {
    ssize_t done = REAL(pwrite64)(fd, buf, n, offset);
    note_write(fd, offset, done);
    return done;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset) {
    return pwrite64(fd, buf, n, offset);
}

ssize_t write(int fd, const void *buf, size_t n) {
    ssize_t done = REAL(write)(fd, buf, n);
    if (enabled && done > 0 && fd > 2) {
        off_t end = lseek(fd, 0, SEEK_CUR);
        if (end >= 0) note_write(fd, end - done, done);
    }
    return done;
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    ssize_t done = REAL(writev)(fd, iov, count);
    if (enabled && done > 0 && fd > 2) {
        off_t end = lseek(fd, 0, SEEK_CUR);
        if (end >= 0) note_write(fd, end - done, done);
    }
    return done;
}

int ftruncate(int fd, off_t len) {
    int rc = REAL(ftruncate)(fd, len);
    if (rc == 0) note_reshape(fd);
    return rc;
}

int ftruncate64(int fd, off_t len) {
    int rc = REAL(ftruncate64)(fd, len);
    if (rc == 0) note_reshape(fd);
    return rc;
}

int fallocate(int fd, int mode, off_t offset, off_t len) {
    int rc = REAL(fallocate)(fd, mode, offset, len);
    if (rc == 0) note_reshape(fd);
    return rc;
}

int fallocate64(int fd, int mode, off_t offset, off_t len) {
    int rc = REAL(fallocate64)(fd, mode, offset, len);
    if (rc == 0) note_reshape(fd);
    return rc;
}

/* ---- durability calls ----------------------------------------------------------- */

int fsync(int fd) {
    int rc = REAL(fsync)(fd);
    if (rc == 0) sync_fd(fd);
    return rc;
}

int fdatasync(int fd) {
    int rc = REAL(fdatasync)(fd);
    if (rc == 0) sync_fd(fd);
    return rc;
}

static void note_map(void *addr, size_t len, int fd, off_t offset) {
    if (!enabled || addr == MAP_FAILED || fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
    char path[PATH_MAX];
    if (!fd_path(fd, path)) return;
    int rfd = reopen_ro(fd);
    if (rfd < 0) return;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < MAX_MAPS && maps[i].addr) i++;
    if (i < MAX_MAPS) maps[i] = (struct map){addr, len, offset, st.st_ino, rfd};
    else close(rfd);
    pthread_mutex_unlock(&lock);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
    void *m = REAL(mmap)(addr, len, prot, flags, fd, offset);
    if ((flags & MAP_SHARED) && (prot & PROT_WRITE)) note_map(m, len, fd, offset);
    return m;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
    void *m = REAL(mmap64)(addr, len, prot, flags, fd, offset);
    if ((flags & MAP_SHARED) && (prot & PROT_WRITE)) note_map(m, len, fd, offset);
    return m;
}

int munmap(void *addr, size_t len) {
    if (enabled) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < MAX_MAPS; i++)
            if (maps[i].addr == addr) {
                close(maps[i].rfd);
                maps[i].addr = NULL;
            }
        pthread_mutex_unlock(&lock);
    }
    return REAL(munmap)(addr, len);
}

int msync(void *addr, size_t len, int flags) {
    int rc = REAL(msync)(addr, len, flags);
    if (rc != 0 || !enabled || !(flags & MS_SYNC)) return rc;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_MAPS; i++) {
        struct map *m = &maps[i];
        if (!m->addr) continue;
        char *base = m->addr;
        if ((char *)addr < base || (char *)addr >= base + m->len) continue;
        off_t start = m->offset + ((char *)addr - base);
        struct stat st;
        if (fstat(m->rfd, &st) == 0) {
            char key[64];
            key_of(m->ino, key, sizeof key);
            if (!shadow_exists(key)) copy_range(m->rfd, key, 0, st.st_size, st.st_size);
            else copy_range(m->rfd, key, start, start + (off_t)len, st.st_size);
        }
        break;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- names ---------------------------------------------------------------------- */

int unlink(const char *path) {
    ino_t ino = doomed(AT_FDCWD, path);
    int rc = REAL(unlink)(path);
    if (rc == 0) retire(ino);
    return rc;
}

int unlinkat(int dirfd, const char *path, int flags) {
    ino_t ino = doomed(dirfd, path);
    int rc = REAL(unlinkat)(dirfd, path, flags);
    if (rc == 0) retire(ino);
    return rc;
}

int rmdir(const char *path) {
    ino_t ino = doomed(AT_FDCWD, path);
    int rc = REAL(rmdir)(path);
    if (rc == 0) retire(ino);
    return rc;
}

int rename(const char *from, const char *to) {
    ino_t ino = doomed(AT_FDCWD, to);
    struct stat a;
    if (ino && lstat(from, &a) == 0 && a.st_ino == ino) ino = 0; /* same file: nothing freed */
    int rc = REAL(rename)(from, to);
    if (rc == 0) retire(ino);
    return rc;
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    ino_t ino = doomed(tofd, to);
    struct stat a;
    if (ino && fstatat(fromfd, from, &a, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == ino) ino = 0;
    int rc = REAL(renameat)(fromfd, from, tofd, to);
    if (rc == 0) retire(ino);
    return rc;
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags) {
    ino_t ino = (flags & RENAME_EXCHANGE) ? 0 : doomed(tofd, to);
    struct stat a;
    if (ino && fstatat(fromfd, from, &a, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == ino) ino = 0;
    int rc = REAL(renameat2)(fromfd, from, tofd, to, flags);
    if (rc == 0) retire(ino);
    return rc;
}
