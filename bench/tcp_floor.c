/* The floor under a W-rank all-reduce over loopback TCP on this machine: W processes in a full
 * TCP mesh move exactly the bytes a reduce-scatter + all-gather all-reduce of `bytes` moves
 * (each rank sends bytes/W to every peer and receives bytes/W from every peer, twice), with no
 * reduction, no framing and no bookkeeping: non-blocking send()/recv() on every socket in
 * turn, sched_yield() after a round that moved nothing (the ranks share the cores).
 * Timed like `lattice bench coll` and bench/coll_mpi_bench.c: per size, a warm-up, then
 * `iters` iterations each timed on every rank; an iteration costs its slowest rank's time;
 * the median over iterations is printed.
 *   tcp_floor W min_bytes max_bytes iters      -> lines "bytes median_us min_us"
 * Built and run by bench/coll_vs_mpi.sh (FLOOR=1). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_W 16

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void die(const char* what) {
  perror(what);
  exit(1);
}

/* One phase: `seg` bytes to and from every peer. */
static void phase(int w, int r, const int* fd, const char* out, char* in, size_t seg) {
  size_t sent[MAX_W] = {0}, got[MAX_W] = {0};
  int left = 2 * (w - 1);
  if (seg == 0) return;
  while (left > 0) {
    int moved = 0;
    for (int p = 0; p < w; ++p) {
      if (p == r) continue;
      if (sent[p] < seg) {
        size_t ask = seg - sent[p] > (512u << 10) ? (512u << 10) : seg - sent[p];
        ssize_t n = send(fd[p], out + sent[p], ask, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
          sent[p] += (size_t)n;
          moved = 1;
          if (sent[p] == seg) --left;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          die("send");
        }
      }
      if (got[p] < seg) {
        ssize_t n = recv(fd[p], in + (size_t)p * seg + got[p], seg - got[p], MSG_DONTWAIT);
        if (n > 0) {
          got[p] += (size_t)n;
          moved = 1;
          if (got[p] == seg) --left;
        } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          die("recv");
        }
      }
    }
    if (!moved) sched_yield();
  }
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: tcp_floor W min_bytes max_bytes iters\n");
    return 2;
  }
  const int w = atoi(argv[1]);
  const size_t min = strtoull(argv[2], NULL, 10), max = strtoull(argv[3], NULL, 10);
  const int iters = atoi(argv[4]);
  if (w < 2 || w > MAX_W || iters < 1 || min < 1 || max < min) {
    fprintf(stderr, "tcp_floor: bad arguments\n");
    return 2;
  }
  int listener[MAX_W];
  struct sockaddr_in addr[MAX_W];
  for (int i = 0; i < w; ++i) {
    listener[i] = socket(AF_INET, SOCK_STREAM, 0);
    memset(&addr[i], 0, sizeof addr[i]);
    addr[i].sin_family = AF_INET;
    addr[i].sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr[i];
    if (bind(listener[i], (struct sockaddr*)&addr[i], len) < 0 || listen(listener[i], MAX_W) < 0 ||
        getsockname(listener[i], (struct sockaddr*)&addr[i], &len) < 0)
      die("listen");
  }
  double* times = mmap(NULL, sizeof(double) * (size_t)iters * (size_t)w, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (times == MAP_FAILED) die("mmap");
  int r = 0;
  for (int i = 1; i < w; ++i) {
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      r = i;
      break;
    }
  }
  int fd[MAX_W];
  for (int p = r + 1; p < w; ++p) {  /* connect up, accept from below */
    fd[p] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd[p], (struct sockaddr*)&addr[p], sizeof addr[p]) < 0) die("connect");
    if (write(fd[p], &r, sizeof r) != sizeof r) die("write");
  }
  for (int k = 0; k < r; ++k) {
    int s = accept(listener[r], NULL, NULL), q;
    if (s < 0 || read(s, &q, sizeof q) != sizeof q || q < 0 || q >= w) die("accept");
    fd[q] = s;
  }
  for (int p = 0; p < w; ++p) {
    if (p == r) continue;
    int one = 1;
    setsockopt(fd[p], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd[p], F_SETFL, O_NONBLOCK);
  }
  const size_t max_seg = (max + (size_t)w - 1) / (size_t)w;
  char* out = calloc(1, max_seg + 64);
  char* in = calloc((size_t)w, max_seg + 64);
  if (!out || !in) die("calloc");
  double* mine = times + (size_t)r * (size_t)iters;
  for (size_t bytes = min; bytes <= max; bytes *= 2) {
    const size_t seg = (bytes + (size_t)w - 1) / (size_t)w;
    int n = iters;
    if (bytes > (1u << 20)) n = (int)((double)iters * (double)(1u << 20) / (double)bytes);
    if (n < 5) n = 5;
    if (n > iters) n = iters;
    for (int i = 0; i < 10; ++i) {
      phase(w, r, fd, out, in, seg);
      phase(w, r, fd, out, in, seg);
    }
    for (int i = 0; i < n; ++i) {
      double t0 = now_us();
      phase(w, r, fd, out, in, seg); /* reduce-scatter's bytes */
      phase(w, r, fd, out, in, seg); /* all-gather's bytes */
      mine[i] = now_us() - t0;
    }
    /* A rendezvous so rank 0 reads every rank's times: one more phase of 1 byte. */
    phase(w, r, fd, out, in, 1);
    if (r == 0) {
      for (int i = 0; i < n; ++i)
        for (int q = 1; q < w; ++q)
          if (times[(size_t)q * (size_t)iters + (size_t)i] > mine[i]) mine[i] = times[(size_t)q * (size_t)iters + (size_t)i];
      qsort(mine, (size_t)n, sizeof(double), by_value);
      printf("%zu %.3f %.3f\n", bytes, mine[n / 2], mine[0]);
      fflush(stdout);
    }
    phase(w, r, fd, out, in, 1); /* rank 0 is done reading before anyone writes the next size */
  }
  if (r == 0)
    for (int i = 1; i < w; ++i) wait(NULL);
  return 0;
}
