/* pi by MPI ranks: integrates 4/(1+x^2) over [0,1] with the midpoint rule, each rank summing
 * every size-th interval, and MPI_Reduce-ing the partial sums to rank 0.
 *
 *   mpirun -n 4 --hostfile /etc/mpi/hostfile /opt/pi [intervals] [--exit-code N]
 *
 * Every rank reports its host; rank 0 prints, e.g.
 *   pi is approximately 3.1415926535897643, error 0.0000000000000289, 4 ranks on 2 hosts, 0.012 s
 * --exit-code N makes every rank exit with N after the computation (for failure tests).
 * Installed in the image localhost/mpi-pi as /opt/pi (source: /opt/pi.c). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PI25 3.141592653589793238462643

int main(int argc, char **argv) {
  long long n = 100000000LL;
  int exit_code = 0;
  MPI_Init(&argc, &argv);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--exit-code") == 0 && i + 1 < argc)
      exit_code = atoi(argv[++i]);
    else
      n = atoll(argv[i]);
  }
  if (n <= 0) n = 100000000LL;

  int rank, size, len;
  char host[MPI_MAX_PROCESSOR_NAME];
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Get_processor_name(host, &len);

  /* Gather host names at rank 0, so that the output is ordered and one block. */
  char *hosts = NULL;
  if (rank == 0) hosts = malloc((size_t)size * MPI_MAX_PROCESSOR_NAME);
  MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
             MPI_COMM_WORLD);

  double t0 = MPI_Wtime();
  double h = 1.0 / (double)n, sum = 0.0;
  for (long long i = rank; i < n; i += size) {
    double x = h * ((double)i + 0.5);
    sum += 4.0 / (1.0 + x * x);
  }
  double mine = h * sum, pi = 0.0;
  MPI_Reduce(&mine, &pi, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  double t1 = MPI_Wtime();

  if (rank == 0) {
    int distinct = 0;
    for (int r = 0; r < size; r++) {
      const char *hr = hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME;
      int seen = 0;
      for (int q = 0; q < r && !seen; q++) seen = strcmp(hr, hosts + (size_t)q * MPI_MAX_PROCESSOR_NAME) == 0;
      distinct += !seen;
      printf("rank %d of %d on %s\n", r, size, hr);
    }
    printf("pi is approximately %.16f, error %.16f, %d ranks on %d hosts, %lld intervals, %.3f s\n", pi,
           fabs(pi - PI25), size, distinct, n, t1 - t0);
    fflush(stdout);
    free(hosts);
  }
  MPI_Finalize();
  return exit_code;
}
