/* OSU-style MPI all-reduce latency, measured exactly like `lattice bench coll`: per size,
 * untimed warm-up (rounds of `warmup` calls for at least 20 ms, the first size 200 ms), a barrier, then `iters` calls each timed; an iteration costs its
 * slowest rank's time (MPI_Allreduce MAX over the timings); the median over iterations is
 * printed. Buffers are f32, sum, out of place.
 *   mpirun -n 4 coll_mpi_bench [min_bytes max_bytes iters warmup]
 * Output: one line per size, "bytes median_us min_us". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  size_t min = argc > 1 ? strtoull(argv[1], NULL, 10) : 8;
  size_t max = argc > 2 ? strtoull(argv[2], NULL, 10) : (1u << 20);
  int iters = argc > 3 ? atoi(argv[3]) : 100;
  int warmup = argc > 4 ? atoi(argv[4]) : 10;
  float* in = malloc(max + 64);
  float* out = malloc(max + 64);
  double* t = malloc(sizeof(double) * (size_t)iters);
  double* t_max = malloc(sizeof(double) * (size_t)iters);
  for (size_t i = 0; i < max / 4 + 1; ++i) in[i] = (float)((rank * 7 + i * 3) % 11) - 5.0f;
  for (size_t bytes = min < 4 ? 4 : min; bytes <= max; bytes *= 2) {
    int count = (int)(bytes / 4);
    int n = iters;
    if (bytes > (1u << 20)) {
      n = (int)((double)iters * (double)(1u << 20) / (double)bytes);
      if (n < 5) n = 5;
    }
    /* Warm up by count and by time, like lattice bench coll: rounds of `warmup` calls until
     * every rank spent warm_ms (the first size 200 ms, later ones 20 ms). */
    double warm_ms = bytes == (min < 4 ? 4 : min) ? 200.0 : 20.0, w0 = MPI_Wtime();
    for (int more = warmup > 0; more;) {
      for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      int mine = (MPI_Wtime() - w0) * 1e3 < warm_ms;
      MPI_Allreduce(&mine, &more, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < n; ++i) {
      double t0 = MPI_Wtime();
      MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      t[i] = (MPI_Wtime() - t0) * 1e6;
    }
    MPI_Allreduce(t, t_max, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      qsort(t_max, (size_t)n, sizeof(double), cmp);
      printf("%zu %.3f %.3f\n", bytes, t_max[n / 2], t_max[0]);
      fflush(stdout);
    }
  }
  free(in);
  free(out);
  free(t);
  free(t_max);
  MPI_Finalize();
  return 0;
}
