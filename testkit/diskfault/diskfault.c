/*
 * diskfault: an LD_PRELOAD shim that injects disk faults into one process's files,
 * for holdfast's tests of real processes (cli/tests/disk.rs, scripts/stress.sh).
 * Built by the test with the system C compiler (testkit/src/diskfault.rs).
 *
 *   DISKFAULT_DIR=<dir>   only files under this directory are touched
 *   DISKFAULT_CTL=<file>  read at every call; its first line chooses the fault:
 *                           (missing or empty)   none
 *                           fail-sync            fsync, fdatasync, sync_file_range: EIO
 *                           fail-write           write, pwrite, writev, pwritev: EIO
 *                           slow-sync <ms>       fsync, fdatasync: <ms> later, then done
 *   Every fault injected is appended to <DISKFAULT_CTL>.log as
 *   "<unix-ms> <call> <path>\n", so a test knows when the process first saw one.
 *
 * Nothing here is linked into holdfast itself.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum fault { NONE, FAIL_SYNC, FAIL_WRITE, SLOW_SYNC };

static ssize_t (*real_write)(int, const void *, size_t);

static enum fault current(long *ms) {
    const char *ctl = getenv("DISKFAULT_CTL");
    if (!ctl) return NONE;
    int fd = open(ctl, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NONE;
    char buf[64] = {0};
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return NONE;
    if (strncmp(buf, "fail-sync", 9) == 0) return FAIL_SYNC;
    if (strncmp(buf, "fail-write", 10) == 0) return FAIL_WRITE;
    if (strncmp(buf, "slow-sync", 9) == 0) {
        *ms = strtol(buf + 9, NULL, 10);
        return SLOW_SYNC;
    }
    return NONE;
}

/* Is `fd` a file under DISKFAULT_DIR? Its path, if so. */
static int ours(int fd, char *path, size_t len) {
    const char *dir = getenv("DISKFAULT_DIR");
    if (!dir || !*dir) return 0;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, len - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return strncmp(path, dir, strlen(dir)) == 0;
}

static void note(const char *call, const char *path) {
    const char *ctl = getenv("DISKFAULT_CTL");
    if (!ctl) return;
    char log[4096];
    snprintf(log, sizeof log, "%s.log", ctl);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    char line[4200];
    int n = snprintf(line, sizeof line, "%lld %s %s\n", (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000, call, path);
    if (!real_write) real_write = dlsym(RTLD_NEXT, "write");
    real_write(fd, line, (size_t)n);
    close(fd);
}

/* The fault for a sync of `fd`: 0 to go on, -1 (errno set) to fail. */
static int sync_fault(int fd, const char *call) {
    char path[4096];
    long ms = 0;
    if (!ours(fd, path, sizeof path)) return 0;
    enum fault f = current(&ms);
    if (f != FAIL_SYNC && f != SLOW_SYNC) return 0;
    note(call, path);
    if (f == SLOW_SYNC) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        return 0;
    }
    errno = EIO;
    return -1;
}

static int write_fault(int fd, const char *call) {
    char path[4096];
    long ms = 0;
    if (!ours(fd, path, sizeof path) || current(&ms) != FAIL_WRITE) return 0;
    note(call, path);
    errno = EIO;
    return -1;
}

#define REAL(name, ret, ...) \
    static ret (*real)(__VA_ARGS__); \
    if (!real) real = dlsym(RTLD_NEXT, name)

int fsync(int fd) {
    REAL("fsync", int, int);
    if (sync_fault(fd, "fsync") < 0) return -1;
    return real(fd);
}

int fdatasync(int fd) {
    REAL("fdatasync", int, int);
    if (sync_fault(fd, "fdatasync") < 0) return -1;
    return real(fd);
}

int sync_file_range(int fd, off64_t off, off64_t n, unsigned int flags) {
    REAL("sync_file_range", int, int, off64_t, off64_t, unsigned int);
    if (sync_fault(fd, "sync_file_range") < 0) return -1;
    return real(fd, off, n, flags);
}

ssize_t write(int fd, const void *buf, size_t n) {
    if (!real_write) real_write = dlsym(RTLD_NEXT, "write");
    if (fd > 2 && write_fault(fd, "write") < 0) return -1;
    return real_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL("pwrite", ssize_t, int, const void *, size_t, off_t);
    if (write_fault(fd, "pwrite") < 0) return -1;
    return real(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    REAL("pwrite64", ssize_t, int, const void *, size_t, off64_t);
    if (write_fault(fd, "pwrite64") < 0) return -1;
    return real(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    REAL("writev", ssize_t, int, const struct iovec *, int);
    if (fd > 2 && write_fault(fd, "writev") < 0) return -1;
    return real(fd, iov, cnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    REAL("pwritev", ssize_t, int, const struct iovec *, int, off_t);
    if (write_fault(fd, "pwritev") < 0) return -1;
    return real(fd, iov, cnt, off);
}
