/*
 * MPI side of the collective comparison: MPI_Barrier and MPI_Allreduce (double, MPI_SUM) timed
 * call by call, printed by rank 0 as JSON lines with the keys gaspi-bench uses, so that
 * scripts/bench.sh can set them beside the gaspi lines.
 *
 * One source builds against MPICH and Open MPI; the labels come from the command line:
 *
 *     mpiexec -n 4 coll LIB TRANSPORT [MAX_ITERS]
 *
 * The sizes, iteration counts, warm-up and input values mirror src/bench/coll.rs: change
 * both together. MAX_ITERS caps the timed calls per figure, for MPIs whose calls are slow when
 * oversubscribed. Exits non-zero when a reduction result is wrong.
 */
#include "bench.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int SIZES[] = {8, 65536, 1 << 20};

/* Timed calls for a payload of `bytes` (0: barrier); the warm-up is a tenth of it. */
static int iterations(int bytes, int cap)
{
    int n = bytes <= 8 ? 1000 : bytes <= 65536 ? 300 : 100;
    return n < cap ? n : cap;
}

static void report(const char *bench, const char *lib, const char *transport, int ranks,
                   int bytes, double *samples, int iters)
{
    qsort(samples, (size_t)iters, sizeof *samples, compare_double);
    double us = samples[iters / 2] * 1e6;
    double mib_s = us > 0 ? bytes / (double)(1 << 20) / (us / 1e6) : 0;
    printf("{\"bench\":\"%s\",\"lib\":\"%s\",\"transport\":\"%s\",\"ranks\":%d,\"bytes\":%d,"
           "\"median_us\":%.3f,\"mib_s\":%.1f,\"iters\":%d}\n",
           bench, lib, transport, ranks, bytes, us, mib_s, iters);
    fflush(stdout);
}

/* Every element's sum over the ranks differs by its position, so a misplaced block shows. */
static double input_value(int rank, size_t i)
{
    return (double)(rank + 1) * (double)(1 + i % 4);
}

int main(int argc, char **argv)
{
    struct job job = start(&argc, &argv);
    int rank = job.rank, ranks = job.ranks, cap = job.cap;
    const char *lib = job.lib, *transport = job.transport;

    /* The barrier and the 8 B allreduce run the most calls. */
    double *samples = malloc((size_t)iterations(0, cap) * sizeof *samples);
    size_t largest = SIZES[sizeof SIZES / sizeof *SIZES - 1] / sizeof(double);
    double *in = malloc(largest * sizeof *in), *out = malloc(largest * sizeof *out);
    if (!samples || !in || !out) {
        fprintf(stderr, "coll: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < largest; i++)
        in[i] = input_value(rank, i);
    double rank_sum = ranks * (ranks + 1) / 2.0;
    int wrong = 0;

    int iters = iterations(0, cap), warmup = iters / 10 + 1;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < warmup + iters; i++) {
        double start = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        if (i >= warmup)
            samples[i - warmup] = MPI_Wtime() - start;
    }
    if (rank == 0)
        report("barrier", lib, transport, ranks, 0, samples, iters);

    for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES; s++) {
        int bytes = SIZES[s], count = bytes / (int)sizeof(double);
        iters = iterations(bytes, cap);
        warmup = iters / 10 + 1;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < warmup + iters; i++) {
            memset(out, 0, (size_t)bytes);
            double start = MPI_Wtime();
            MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            double took = MPI_Wtime() - start;
            if (i >= warmup)
                samples[i - warmup] = took;
            for (int k = 0; k < count; k++)
                wrong |= out[k] != rank_sum * (double)(1 + k % 4);
        }
        if (rank == 0)
            report("allreduce", lib, transport, ranks, bytes, samples, iters);
    }

    int any_wrong = 0;
    MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (any_wrong && rank == 0)
        fprintf(stderr, "coll: %s allreduce returned a wrong sum\n", lib);
    free(samples);
    free(in);
    free(out);
    MPI_Finalize();
    return any_wrong ? 1 : 0;
}
