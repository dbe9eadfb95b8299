/*
 * What the MPI sides of the benchmarks (coll.c, alltoallv.c, pscw.c, gasnet.c) share: their
 * start, with the command line they all take, the order their samples are sorted in, the
 * figure of the slowest rank and the start of its line, and the stamps in their blocks.
 */
#ifndef BENCH_H
#define BENCH_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The job and its command line, `LIB TRANSPORT [MAX_ITERS]`. */
struct job {
    const char *lib, *transport; /* the labels of the JSON lines */
    int cap;                     /* the most timed calls per figure */
    int rank, ranks;
};

/* Initialises MPI and reads the command line; on a bad one, rank 0 prints the usage and every
 * rank finalises and exits with status 2. */
static struct job start(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    struct job job = {0};
    MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &job.ranks);
    if (*argc < 3 || *argc > 4) {
        if (job.rank == 0)
            fprintf(stderr, "usage: mpiexec -n N %s LIB TRANSPORT [MAX_ITERS]\n", (*argv)[0]);
        MPI_Finalize();
        exit(2);
    }
    job.lib = (*argv)[1];
    job.transport = (*argv)[2];
    job.cap = *argc == 4 ? atoi((*argv)[3]) : 1000;
    if (job.cap < 1)
        job.cap = 1;
    return job;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Inline, so that a benchmark that uses none of what follows builds without warnings. */
static inline int compare_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The largest of the ranks' medians of their `n` samples, on rank 0 (collective; a rank
 * without samples counts as 0). Sorts the samples. */
static inline double slowest_median(double *samples, int n)
{
    qsort(samples, (size_t)n, sizeof *samples, compare_double);
    double mine = n > 0 ? samples[n / 2] : 0, slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    return slowest;
}

/* Rank 0 starts the JSON line of a figure with the keys every line has, the largest of the
 * ranks' medians of their `n` samples among them (collective; sorts the samples), and returns
 * 1: the benchmark's own keys and the closing brace follow. Other ranks print nothing and
 * return 0. */
static inline int start_line(const char *bench, const struct job *job, int bytes,
                             double *samples, int n, int iters)
{
    double us = slowest_median(samples, n) * 1e6;
    if (job->rank != 0)
        return 0;
    double mib_s = us > 0 ? bytes / (double)(1 << 20) / (us / 1e6) : 0;
    printf("{\"bench\":\"%s\",\"lib\":\"%s\",\"transport\":\"%s\",\"ranks\":%d,\"bytes\":%d,"
           "\"median_us\":%.3f,\"mib_s\":%.1f,\"iters\":%d",
           bench, job->lib, job->transport, job->ranks, bytes, us, mib_s, iters);
    return 1;
}

/* The stamp of the block `sender` sends `receiver` in `round`, in a block's first and last 8
 * bytes (the same as gaspi-bench's). */
static inline uint64_t stamp(uint64_t round, int sender, int receiver)
{
    return round << 32 | (uint64_t)(sender & 0xffff) << 16 | (uint64_t)(receiver & 0xffff);
}

static inline void put_stamps(char *block, int bytes, uint64_t value)
{
    memcpy(block, &value, 8);
    memcpy(block + bytes - 8, &value, 8);
}

static inline int stamps_are(const char *block, int bytes, uint64_t value)
{
    return memcmp(block, &value, 8) == 0 && memcmp(block + bytes - 8, &value, 8) == 0;
}

#endif
