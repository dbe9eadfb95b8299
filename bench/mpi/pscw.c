/*
 * MPI side of the epoch comparison: MPI_Win_post / start / complete / wait on a window from
 * MPI_Win_allocate (shared memory between the ranks of one host where the MPI does that), with
 * MPI_Put in the access epochs, printed by rank 0 as JSON lines with the keys gaspi-bench uses,
 * so that scripts/bench-pscw.sh can set them beside the gaspi lines.
 *
 * One source builds against MPICH and Open MPI; the labels come from the command line:
 *
 *     mpiexec -n 4 pscw LIB TRANSPORT [MAX_ITERS]
 *
 * The patterns ("pscw": an epoch ping-pong in the pairs (0, 1), (2, 3)... all at once;
 * "pscw_halo": one epoch with the distinct neighbours on a periodic 2-D grid), sizes,
 * iteration counts, warm-up, stamps and the figure (the largest of the ranks' medians) mirror
 * bench/src/pscw.rs: change both together. MAX_ITERS caps the timed round trips or epochs per
 * figure, for MPIs whose calls are slow when oversubscribed. Exits non-zero when a block
 * arrives with the wrong stamp.
 */
#include "bench.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static const int SIZES[] = {8, 65536};
#define LARGEST 65536
/* The most distinct neighbours on the grid. */
#define NEIGHBOURS 4

/* Timed round trips or epochs for blocks of `bytes`, at most `cap`; the warm-up is a tenth of
 * it, plus one. */
static int iterations(int bytes, int cap)
{
    int n = bytes <= 1024 ? 1000 : 300;
    return n < cap ? n : cap;
}

/* `me`'s distinct neighbours on the periodic grid of px × py ranks of a job of `size` (px the
 * largest divisor not above its square root), ascending, without `me`; returns their count. */
static int neighbours(int me, int size, int *out)
{
    int px = 1;
    for (int w = 1; w * w <= size; w++)
        if (size % w == 0)
            px = w;
    int py = size / px, x = me % px, y = me / px;
    int around[NEIGHBOURS] = {y * px + (x + px - 1) % px, y * px + (x + 1) % px,
                              (y + py - 1) % py * px + x, (y + 1) % py * px + x};
    qsort(around, NEIGHBOURS, sizeof *around, compare_int);
    int n = 0;
    for (int i = 0; i < NEIGHBOURS; i++)
        if (around[i] != me && (n == 0 || out[n - 1] != around[i]))
            out[n++] = around[i];
    return n;
}

/* The window, its memory, the source of the puts, and what every epoch needs to know. */
struct epochs {
    MPI_Win win;
    char *base, *src;
    MPI_Group world;
    int rank;
    uint64_t round; /* over every figure, so that a block of an earlier one shows */
    int wrong;
};

/* Rank 0 prints the largest of the ranks' medians of `samples` (collective); `peers` < 0
 * leaves the key out. */
static void report(const char *bench, const struct job *job, int bytes, double *samples, int n,
                   int iters, int peers)
{
    if (!start_line(bench, job, bytes, samples, n, iters))
        return;
    if (peers >= 0)
        printf(",\"peers\":%d", peers);
    printf("}\n");
    fflush(stdout);
}

/* One access epoch of the ping-pong: `bytes` to `peer` (alone in `group`). */
static void access_epoch(struct epochs *e, MPI_Group group, int peer, int bytes)
{
    put_stamps(e->src, bytes, stamp(e->round, e->rank, peer));
    MPI_Win_start(group, 0, e->win);
    MPI_Put(e->src, bytes, MPI_BYTE, peer, 0, bytes, MPI_BYTE, e->win);
    MPI_Win_complete(e->win);
}

/* One exposure epoch of the ping-pong: `bytes` from `peer` (alone in `group`), checked. */
static void exposure_epoch(struct epochs *e, MPI_Group group, int peer, int bytes)
{
    MPI_Win_post(group, 0, e->win);
    MPI_Win_wait(e->win);
    e->wrong |= !stamps_are(e->base, bytes, stamp(e->round, peer, e->rank));
}

/* The epoch ping-pong of `bytes` in the pairs; the last rank of an odd job sits out. */
static void pingpong(struct epochs *e, const struct job *job, int bytes, double *samples)
{
    int peer = job->rank ^ 1, iters = iterations(bytes, job->cap), warmup = iters / 10 + 1, n = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (peer < job->ranks) {
        MPI_Group group;
        MPI_Group_incl(e->world, 1, &peer, &group);
        for (int i = 0; i < warmup + iters; i++) {
            e->round++;
            double start = MPI_Wtime();
            if (job->rank < peer) {
                access_epoch(e, group, peer, bytes);
                exposure_epoch(e, group, peer, bytes);
            } else {
                exposure_epoch(e, group, peer, bytes);
                access_epoch(e, group, peer, bytes);
            }
            double took = (MPI_Wtime() - start) / 2;
            if (i >= warmup)
                samples[n++] = took;
        }
        MPI_Group_free(&group);
    } else {
        /* The rounds of the others, so that the stamps of later figures agree. */
        e->round += (uint64_t)(warmup + iters);
    }
    report("pscw", job, bytes, samples, n, iters, -1);
}

/* Halo epochs with blocks of `bytes`: the block for the k-th neighbour leaves from k * bytes of
 * the source and lands at this rank's place among that neighbour's neighbours. */
static void halo(struct epochs *e, const struct job *job, int bytes, double *samples)
{
    int around[NEIGHBOURS], theirs[NEIGHBOURS], place[NEIGHBOURS];
    int n = neighbours(job->rank, job->ranks, around);
    for (int k = 0; k < n; k++) {
        int m = neighbours(around[k], job->ranks, theirs);
        place[k] = 0;
        for (int j = 0; j < m; j++)
            if (theirs[j] == job->rank)
                place[k] = j;
    }
    MPI_Group group;
    MPI_Group_incl(e->world, n, around, &group);
    int iters = iterations(bytes, job->cap), warmup = iters / 10 + 1;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < warmup + iters; i++) {
        e->round++;
        for (int k = 0; k < n; k++)
            put_stamps(e->src + (size_t)k * bytes, bytes, stamp(e->round, job->rank, around[k]));
        double start = MPI_Wtime();
        MPI_Win_post(group, 0, e->win);
        MPI_Win_start(group, 0, e->win);
        for (int k = 0; k < n; k++)
            MPI_Put(e->src + (size_t)k * bytes, bytes, MPI_BYTE, around[k],
                    (MPI_Aint)place[k] * bytes, bytes, MPI_BYTE, e->win);
        MPI_Win_complete(e->win);
        MPI_Win_wait(e->win);
        double took = MPI_Wtime() - start;
        if (i >= warmup)
            samples[i - warmup] = took;
        for (int k = 0; k < n; k++)
            e->wrong |= !stamps_are(e->base + (size_t)k * bytes, bytes,
                                    stamp(e->round, around[k], job->rank));
    }
    MPI_Group_free(&group);
    report("pscw_halo", job, bytes, samples, iters, iters, n);
}

int main(int argc, char **argv)
{
    struct job job = start(&argc, &argv);
    struct epochs e = {.rank = job.rank};
    MPI_Aint window = (MPI_Aint)LARGEST * NEIGHBOURS;
    MPI_Win_allocate(window, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &e.base, &e.win);
    MPI_Comm_group(MPI_COMM_WORLD, &e.world);
    e.src = malloc((size_t)window);
    double *samples = malloc((size_t)iterations(SIZES[0], job.cap) * sizeof *samples);
    if (!e.src || !samples) {
        fprintf(stderr, "pscw: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t sizes = sizeof SIZES / sizeof *SIZES;
    for (size_t s = 0; s < sizes; s++)
        pingpong(&e, &job, SIZES[s], samples);
    for (size_t s = 0; s < sizes; s++)
        halo(&e, &job, SIZES[s], samples);

    int any_wrong = 0;
    MPI_Allreduce(&e.wrong, &any_wrong, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (any_wrong && job.rank == 0)
        fprintf(stderr, "pscw: %s delivered a block with the wrong stamp\n", job.lib);
    MPI_Group_free(&e.world);
    MPI_Win_free(&e.win);
    free(e.src);
    free(samples);
    MPI_Finalize();
    return any_wrong ? 1 : 0;
}
