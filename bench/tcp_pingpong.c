/* Baselines for bench/fabric_vs_peers.sh (our own code, built by the script with cc):
 *
 *   tcp_pingpong lat [-s BYTES] [-n ITERS] [-w WARMUP] [-b]
 *       Raw TCP ping-pong over loopback between this process and a forked child. With -b both
 *       sides busy-poll (non-blocking recv in a loop, never sleep); without, they block in recv.
 *       Prints one JSON line: one-way latency (half of each round trip) min/median/avg in us.
 *   tcp_pingpong memcpy [-s BYTES] [-t SECONDS]
 *       Single-thread memcpy bandwidth of one BYTES-sized buffer into another, repeated for
 *       SECONDS. Prints one JSON line with gbps = 1e9 bytes per second.
 *
 * Every wait is bounded: the whole run has an alarm (default 60 s) and the child dies with
 * its parent.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char* what) {
  fprintf(stderr, "tcp_pingpong: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Reads exactly n bytes; busy: spin on MSG_DONTWAIT. Returns 0, or -1 on EOF/error. */
static int read_full(int fd, char* p, size_t n, int busy) {
  while (n > 0) {
    ssize_t r = recv(fd, p, n, busy ? MSG_DONTWAIT : 0);
    if (r > 0) {
      p += r;
      n -= (size_t)r;
    } else if (r == 0) {
      return -1;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return -1;
    }
  }
  return 0;
}

static int write_full(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
    } else if (w < 0 && errno != EINTR && errno != EAGAIN) {
      return -1;
    }
  }
  return 0;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static int run_lat(size_t bytes, long iters, long warmup, int busy) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) die("socket");
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(ls, (struct sockaddr*)&a, sizeof a) != 0) die("bind");
  socklen_t al = sizeof a;
  if (getsockname(ls, (struct sockaddr*)&a, &al) != 0) die("getsockname");
  if (listen(ls, 1) != 0) die("listen");
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) die("fork");
  char* buf = calloc(1, bytes);
  if (!buf) die("calloc");
  const int one = 1;
  if (pid == 0) { /* echo server */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    int fd = accept(ls, NULL, NULL);
    if (fd < 0) _exit(1);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (long i = 0; i < iters + warmup; ++i) {
      if (read_full(fd, buf, bytes, busy) != 0) _exit(1);
      if (write_full(fd, buf, bytes) != 0) _exit(1);
    }
    _exit(0);
  }
  close(ls);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) die("connect");
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  double* t = malloc(sizeof(double) * (size_t)iters);
  if (!t) die("malloc");
  for (long i = 0; i < iters + warmup; ++i) {
    double t0 = now_ns();
    if (write_full(fd, buf, bytes) != 0 || read_full(fd, buf, bytes, busy) != 0) {
      fprintf(stderr, "tcp_pingpong: echo server went away\n");
      return 1;
    }
    double t1 = now_ns();
    if (i >= warmup) t[i - warmup] = (t1 - t0) / 2.0;
  }
  close(fd);
  int st = 0;
  waitpid(pid, &st, 0);
  qsort(t, (size_t)iters, sizeof(double), cmp_double);
  double sum = 0;
  for (long i = 0; i < iters; ++i) sum += t[i];
  double median = iters % 2 ? t[iters / 2] : (t[iters / 2 - 1] + t[iters / 2]) / 2;
  printf("{\"what\":\"tcp_pingpong\",\"busy_poll\":%s,\"bytes\":%zu,\"iters\":%ld,"
         "\"lat_us_min\":%.4f,\"lat_us_median\":%.4f,\"lat_us_avg\":%.4f}\n",
         busy ? "true" : "false", bytes, iters, t[0] / 1e3, median / 1e3, sum / (double)iters / 1e3);
  return 0;
}

/* Through a volatile pointer so the compiler keeps every copy. */
static void* (*volatile copy_fn)(void*, const void*, size_t) = memcpy;

static int run_memcpy(size_t bytes, double seconds) {
  char* src = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  char* dst = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!src || !dst) die("aligned_alloc");
  memset(src, 0x5a, bytes);
  memset(dst, 0, bytes);
  for (int i = 0; i < 10; ++i) copy_fn(dst, src, bytes); /* warm up */
  double t0 = now_ns(), t1 = t0;
  long n = 0;
  while (t1 - t0 < seconds * 1e9) {
    for (int k = 0; k < 16; ++k) copy_fn(dst, src, bytes);
    n += 16;
    t1 = now_ns();
  }
  double gbps = (double)n * (double)bytes / (t1 - t0);
  printf("{\"what\":\"memcpy\",\"bytes\":%zu,\"copies\":%ld,\"seconds\":%.4f,\"gbps\":%.4f}\n", bytes, n,
         (t1 - t0) / 1e9, gbps);
  return dst[bytes - 1] == 0x5a ? 0 : 1;
}

static size_t parse_size(const char* s) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) goto bad;
  if (*end == 'K' || *end == 'k') v <<= 10, ++end;
  else if (*end == 'M' || *end == 'm') v <<= 20, ++end;
  else if (*end == 'G' || *end == 'g') v <<= 30, ++end;
  if (*end != '\0' || v == 0 || v > (1ull << 32)) goto bad;
  return (size_t)v;
bad:
  fprintf(stderr, "tcp_pingpong: bad size '%s'\n", s);
  exit(2);
}

int main(int argc, char** argv) {
  if (argc < 2 || (strcmp(argv[1], "lat") != 0 && strcmp(argv[1], "memcpy") != 0)) {
    fprintf(stderr, "usage: tcp_pingpong lat [-s BYTES] [-n ITERS] [-w WARMUP] [-b]\n"
                    "       tcp_pingpong memcpy [-s BYTES] [-t SECONDS]\n");
    return 2;
  }
  int lat = strcmp(argv[1], "lat") == 0;
  size_t bytes = lat ? 8 : (1u << 20);
  long iters = 100000, warmup = 1000;
  double seconds = 0.5;
  int busy = 0;
  for (int i = 2; i < argc; ++i) {
    if (!strcmp(argv[i], "-s") && i + 1 < argc) bytes = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "-n") && i + 1 < argc) iters = atol(argv[++i]);
    else if (!strcmp(argv[i], "-w") && i + 1 < argc) warmup = atol(argv[++i]);
    else if (!strcmp(argv[i], "-t") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "-b")) busy = 1;
    else {
      fprintf(stderr, "tcp_pingpong: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (iters < 1 || warmup < 0 || !(seconds > 0 && seconds < 600)) {
    fprintf(stderr, "tcp_pingpong: bad -n/-w/-t\n");
    return 2;
  }
  alarm(60 + (unsigned)seconds);
  return lat ? run_lat(bytes, iters, warmup, busy) : run_memcpy(bytes, seconds);
}
