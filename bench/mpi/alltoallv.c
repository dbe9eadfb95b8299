/*
 * MPI side of the alltoallv comparison: rounds of MPI_Alltoallv over MPI_COMM_WORLD (zero
 * counts for the ranks that are not peers) and of MPI_Neighbor_alltoallv over a distributed
 * graph of the peers (MPI_Dist_graph_create_adjacent), printed by rank 0 as JSON lines with the
 * keys gaspi-bench uses plus "op", so that scripts/bench-alltoallv.sh can set them beside the
 * gaspi lines.
 *
 * One source builds against MPICH and Open MPI; the labels come from the command line:
 *
 *     mpiexec -n 4 alltoallv LIB TRANSPORT [MAX_ITERS]
 *
 * The variants, sizes, iteration counts, warm-up, stamps and the figure (the largest of the
 * ranks' median times per call) mirror bench/src/alltoallv.rs: change both together. MAX_ITERS
 * caps the timed calls per figure, for MPIs whose calls are slow when oversubscribed. Exits
 * non-zero when a block arrives with the wrong stamp.
 */
#include "bench.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int SIZES[] = {8, 1024, 65536, 1 << 20};

/* A rank sends to the ranks at most `reach` away around the ring (INT32_MAX: every rank). */
static const struct {
    const char *name;
    int reach;
} VARIANTS[] = {{"dense", INT32_MAX}, {"sparse2", 1}, {"sparse4", 2}};

/* Timed calls for blocks of `bytes`, at most `cap`; the warm-up is a tenth of it, plus one. */
static int iterations(int bytes, int cap)
{
    int n = bytes <= 1024 ? 1000 : bytes <= 65536 ? 300 : 100;
    return n < cap ? n : cap;
}

/* The ranks `me` sends to (and, the sets being symmetric, receives from) in a job of `size`,
 * ascending, without `me`; returns their count. */
static int peers(int me, int size, int reach, int *out)
{
    int n = 0, far = reach < size - 1 ? reach : size - 1;
    for (int d = 1; d <= far; d++) {
        out[n++] = (me + d) % size;
        out[n++] = (me + size - d) % size;
    }
    qsort(out, (size_t)n, sizeof *out, compare_int);
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (out[i] != me && (kept == 0 || out[kept - 1] != out[i]))
            out[kept++] = out[i];
    return kept;
}

/* Rank 0 prints the largest of the ranks' medians of `samples` (collective). */
static void report(const char *op, const char *variant, int npeers, const char *lib,
                   const char *transport, int ranks, int bytes, double *samples, int iters)
{
    double us = slowest_median(samples, iters) * 1e6;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0)
        return;
    double mib_s = us > 0 ? bytes / (double)(1 << 20) / (us / 1e6) : 0;
    printf("{\"bench\":\"alltoallv\",\"lib\":\"%s\",\"transport\":\"%s\",\"ranks\":%d,"
           "\"bytes\":%d,\"median_us\":%.3f,\"mib_s\":%.1f,\"iters\":%d,\"variant\":\"%s\","
           "\"peers\":%d,\"op\":\"%s\"}\n",
           lib, transport, ranks, bytes, us, mib_s, iters, variant, npeers, op);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    struct job job = start(&argc, &argv);
    int rank = job.rank, ranks = job.ranks, cap = job.cap;
    const char *lib = job.lib, *transport = job.transport;

    /* Buffers for the densest variant at the largest size; counts and displacements for
     * every rank (MPI_Alltoallv) or every peer (MPI_Neighbor_alltoallv, a prefix of them). */
    size_t largest = (size_t)SIZES[sizeof SIZES / sizeof *SIZES - 1] * (size_t)(ranks - 1);
    char *out = malloc(largest ? largest : 1), *in = malloc(largest ? largest : 1);
    int *peer = malloc((size_t)2 * (size_t)ranks * sizeof *peer);
    int *counts = malloc((size_t)ranks * sizeof *counts);
    int *displs = malloc((size_t)ranks * sizeof *displs);
    int *ncounts = malloc((size_t)ranks * sizeof *ncounts);
    int *ndispls = malloc((size_t)ranks * sizeof *ndispls);
    /* Equal weights rather than MPI_UNWEIGHTED, which Open MPI defines as a small integer cast
     * to a pointer that gcc takes for an empty array; without reordering they change nothing. */
    int *weights = malloc((size_t)2 * (size_t)ranks * sizeof *weights);
    double *samples = malloc((size_t)iterations(SIZES[0], cap) * sizeof *samples);
    if (!out || !in || !peer || !counts || !displs || !ncounts || !ndispls || !weights || !samples) {
        fprintf(stderr, "alltoallv: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < 2 * ranks; i++)
        weights[i] = 1;
    int wrong = 0;
    uint64_t round = 0;

    for (size_t v = 0; v < sizeof VARIANTS / sizeof *VARIANTS; v++) {
        int npeers = peers(rank, ranks, VARIANTS[v].reach, peer);
        MPI_Comm graph;
        MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, npeers, peer, weights, npeers, peer,
                                       weights, MPI_INFO_NULL, 0, &graph);
        for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES; s++) {
            int bytes = SIZES[s];
            /* The block for (and from) the i-th peer is at i * bytes in both buffers. */
            memset(counts, 0, (size_t)ranks * sizeof *counts);
            memset(displs, 0, (size_t)ranks * sizeof *displs);
            for (int i = 0; i < npeers; i++) {
                counts[peer[i]] = ncounts[i] = bytes;
                displs[peer[i]] = ndispls[i] = i * bytes;
            }
            for (int neighbour = 0; neighbour < 2; neighbour++) {
                int iters = iterations(bytes, cap), warmup = iters / 10 + 1;
                MPI_Barrier(MPI_COMM_WORLD);
                for (int i = 0; i < warmup + iters; i++) {
                    round++;
                    for (int p = 0; p < npeers; p++)
                        put_stamps(out + (size_t)p * (size_t)bytes, bytes,
                                   stamp(round, rank, peer[p]));
                    double start = MPI_Wtime();
                    if (neighbour)
                        MPI_Neighbor_alltoallv(out, ncounts, ndispls, MPI_BYTE, in, ncounts,
                                               ndispls, MPI_BYTE, graph);
                    else
                        MPI_Alltoallv(out, counts, displs, MPI_BYTE, in, counts, displs,
                                      MPI_BYTE, MPI_COMM_WORLD);
                    double took = MPI_Wtime() - start;
                    if (i >= warmup)
                        samples[i - warmup] = took;
                    for (int p = 0; p < npeers; p++)
                        wrong |= !stamps_are(in + (size_t)p * (size_t)bytes, bytes,
                                             stamp(round, peer[p], rank));
                }
                report(neighbour ? "neighbor_alltoallv" : "alltoallv", VARIANTS[v].name, npeers,
                       lib, transport, ranks, bytes, samples, iters);
            }
        }
        MPI_Comm_free(&graph);
    }

    int any_wrong = 0;
    MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (any_wrong && rank == 0)
        fprintf(stderr, "alltoallv: %s delivered a block with the wrong stamp\n", lib);
    free(out);
    free(in);
    free(peer);
    free(counts);
    free(displs);
    free(ncounts);
    free(ndispls);
    free(weights);
    free(samples);
    MPI_Finalize();
    return any_wrong ? 1 : 0;
}
