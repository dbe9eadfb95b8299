/*
 * What the MPI sides of the benchmarks (coll.c, alltoallv.c) share: their start, with the
 * command line they all take, and the order their samples are sorted in.
 */
#ifndef BENCH_H
#define BENCH_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
