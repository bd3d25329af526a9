/*
 * powerloss_shim: an LD_PRELOAD library that keeps, beside a directory tree, what the
 * process has asked the kernel to make durable there -- so that a test can kill the
 * process and rewrite the tree to exactly that, as a power loss would leave it.
 *
 * The model (what tools/powerloss.py applies after a SIGKILL):
 *   - a file's bytes are durable as of its last fsync/fdatasync (any range), or of an
 *     msync(MS_SYNC) for the range it names (writes through a shared mapping);
 *   - a directory entry (create, rename, unlink) is durable as of the directory's last
 *     fsync; a directory itself exists only if its own entry is durable;
 *   - content follows the inode: a file renamed after its fsync keeps what was synced.
 * It does not model torn sectors or reordered writes inside one unsynced range (a real
 * power loss may keep some unsynced bytes; this keeps none), nor metadata journalling
 * that makes an entry durable without a directory fsync (ext4 often does: the shim is
 * stricter than ext4, never looser).
 *
 * Environment: TERN_POWERLOSS_ROOT (the tree to watch, absolute), TERN_POWERLOSS_SHADOW
 * (where durable state is kept: ino/<inode> contents, dirs/<escaped path> listings).
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

#define MAX_FD 65536
#define MAX_MAPS 8192
#define MAX_RANGES 4096

static char root[PATH_MAX];
static size_t root_len;
static char shadow[PATH_MAX];
static int enabled;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

struct range { off_t start, end; };
struct dirty { ino_t ino; int used; size_t n; int overflow; struct range r[MAX_RANGES]; };
#define MAX_DIRTY 1024
static struct dirty *dirty_table;

struct map { void *addr; size_t len; off_t offset; ino_t ino; char path[PATH_MAX]; };
static struct map maps[MAX_MAPS];

static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_msync)(void *, size_t, int);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);

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
}

/* The path of an open fd if it lies under the root. */
static int fd_path(int fd, char *out) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n <= 0) return 0;
    out[n] = 0;
    return strncmp(out, root, root_len) == 0 && (out[root_len] == 0 || out[root_len] == '/');
}

static void escape(const char *path, char *out) {
    size_t j = 0;
    for (size_t i = 0; path[i] && j < PATH_MAX - 4; i++) {
        if (path[i] == '/') { out[j++] = '%'; out[j++] = '2'; out[j++] = 'F'; }
        else out[j++] = path[i];
    }
    out[j] = 0;
}

/* Copies [start, end) of `src_fd` into the shadow of `ino` (creating it), and sets
 * the shadow's size to `size` when size >= 0. */
static void copy_range(int src_fd, ino_t ino, off_t start, off_t end, off_t size) {
    char dst[PATH_MAX];
    snprintf(dst, sizeof dst, "%s/ino/%lu", shadow, (unsigned long)ino);
    int out = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (out < 0) return;
    char buf[1 << 16];
    for (off_t at = start; at < end;) {
        size_t want = (size_t)(end - at) < sizeof buf ? (size_t)(end - at) : sizeof buf;
        ssize_t n = pread(src_fd, buf, want, at);
        if (n <= 0) break;
        real_pwrite64(out, buf, (size_t)n, at);
        at += n;
    }
    if (size >= 0) ftruncate(out, size);
    close(out);
}

static int shadow_exists(ino_t ino) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/ino/%lu", shadow, (unsigned long)ino);
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
    return NULL;
}

static void note_write(int fd, off_t start, ssize_t len) {
    if (!enabled || len <= 0) return;
    char path[PATH_MAX];
    if (!fd_path(fd, path)) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
    pthread_mutex_lock(&lock);
    struct dirty *d = dirty_for(st.st_ino, 1);
    if (d) {
        if (d->n < MAX_RANGES) d->r[d->n++] = (struct range){start, start + len};
        else d->overflow = 1;
    }
    pthread_mutex_unlock(&lock);
}

/* Records the listing of directory `dir` as durable. */
static void sync_dir(const char *dir) {
    char esc[PATH_MAX], out_path[PATH_MAX];
    escape(dir, esc);
    snprintf(out_path, sizeof out_path, "%s/dirs/%s", shadow, esc);
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char child[PATH_MAX];
            snprintf(child, sizeof child, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(child, &st) != 0) continue;
            fprintf(f, "%c\t%lu\t%s\n", S_ISDIR(st.st_mode) ? 'd' : 'f',
                    (unsigned long)st.st_ino, e->d_name);
        }
        closedir(d);
    }
    fclose(f);
    rename(tmp, out_path);
}

/* fsync/fdatasync: the file's dirty ranges (or all of it) become durable. */
static void sync_fd(int fd) {
    if (!enabled) return;
    char path[PATH_MAX];
    if (!fd_path(fd, path)) return;
    struct stat st;
    if (fstat(fd, &st) != 0) return;
    pthread_mutex_lock(&lock);
    if (S_ISDIR(st.st_mode)) {
        sync_dir(path);
    } else if (S_ISREG(st.st_mode)) {
        int src = open(path, O_RDONLY | O_CLOEXEC);
        if (src >= 0) {
            struct dirty *d = dirty_for(st.st_ino, 0);
            /* An fsync also writes back stores through a shared mapping: all of it. */
            int mapped = 0;
            for (int i = 0; i < MAX_MAPS; i++)
                if (maps[i].addr && maps[i].ino == st.st_ino) mapped = 1;
            if (mapped || !shadow_exists(st.st_ino) || !d || d->overflow) {
                copy_range(src, st.st_ino, 0, st.st_size, st.st_size);
            } else {
                for (size_t i = 0; i < d->n; i++) {
                    off_t end = d->r[i].end < st.st_size ? d->r[i].end : st.st_size;
                    if (d->r[i].start < end) copy_range(src, st.st_ino, d->r[i].start, end, -1);
                }
                copy_range(src, st.st_ino, 0, 0, st.st_size);
            }
            if (d) d->used = 0;
            close(src);
        }
    }
    pthread_mutex_unlock(&lock);
}

static void baseline(const char *dir) {
    sync_dir(dir);
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
                copy_range(src, st.st_ino, 0, st.st_size, st.st_size);
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
    if (!dirty_table) return;
    /* Everything now in the tree counts as durable. */
    baseline(root);
    enabled = 1;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t offset) {
    if (!real_pwrite64) resolve();
    ssize_t done = real_pwrite64(fd, buf, n, offset);
    note_write(fd, offset, done);
    return done;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset) {
    return pwrite64(fd, buf, n, offset);
}

ssize_t write(int fd, const void *buf, size_t n) {
    if (!real_write) resolve();
    ssize_t done = real_write(fd, buf, n);
    if (enabled && done > 0 && fd > 2) {
        off_t end = lseek(fd, 0, SEEK_CUR);
        if (end >= 0) note_write(fd, end - done, done);
    }
    return done;
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    if (!real_writev) resolve();
    ssize_t done = real_writev(fd, iov, count);
    if (enabled && done > 0 && fd > 2) {
        off_t end = lseek(fd, 0, SEEK_CUR);
        if (end >= 0) note_write(fd, end - done, done);
    }
    return done;
}

int fsync(int fd) {
    if (!real_fsync) resolve();
    int rc = real_fsync(fd);
    if (rc == 0) sync_fd(fd);
    return rc;
}

int fdatasync(int fd) {
    if (!real_fdatasync) resolve();
    int rc = real_fdatasync(fd);
    if (rc == 0) sync_fd(fd);
    return rc;
}

static void note_map(void *addr, size_t len, int fd, off_t offset) {
    if (!enabled || addr == MAP_FAILED || fd < 0) return;
    char path[PATH_MAX];
    if (!fd_path(fd, path)) return;
    struct stat st;
    if (fstat(fd, &st) != 0) return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_MAPS; i++)
        if (!maps[i].addr) {
            maps[i] = (struct map){addr, len, offset, st.st_ino, {0}};
            snprintf(maps[i].path, PATH_MAX, "%s", path);
            break;
        }
    pthread_mutex_unlock(&lock);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
    if (!real_mmap) resolve();
    void *m = real_mmap(addr, len, prot, flags, fd, offset);
    if ((flags & MAP_SHARED) && (prot & PROT_WRITE)) note_map(m, len, fd, offset);
    return m;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
    if (!real_mmap64) resolve();
    void *m = real_mmap64(addr, len, prot, flags, fd, offset);
    if ((flags & MAP_SHARED) && (prot & PROT_WRITE)) note_map(m, len, fd, offset);
    return m;
}

int munmap(void *addr, size_t len) {
    if (!real_munmap) resolve();
    if (enabled) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < MAX_MAPS; i++)
            if (maps[i].addr == addr) maps[i].addr = NULL;
        pthread_mutex_unlock(&lock);
    }
    return real_munmap(addr, len);
}

int msync(void *addr, size_t len, int flags) {
    if (!real_msync) resolve();
    int rc = real_msync(addr, len, flags);
    if (rc != 0 || !enabled || !(flags & MS_SYNC)) return rc;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_MAPS; i++) {
        struct map *m = &maps[i];
        if (!m->addr) continue;
        char *base = m->addr;
        if ((char *)addr < base || (char *)addr >= base + m->len) continue;
        off_t start = m->offset + ((char *)addr - base);
        int src = open(m->path, O_RDONLY | O_CLOEXEC);
        if (src >= 0) {
            struct stat st;
            if (fstat(src, &st) == 0 && st.st_ino == m->ino) {
                if (!shadow_exists(m->ino)) copy_range(src, m->ino, 0, st.st_size, st.st_size);
                else copy_range(src, m->ino, start, start + (off_t)len, st.st_size);
            }
            close(src);
        }
        break;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
