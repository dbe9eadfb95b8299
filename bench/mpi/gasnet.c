/*
 * MPI side of the comparison of GASNet's data-movement collectives: MPI_Bcast, MPI_Scatter,
 * MPI_Gather, MPI_Allgather, MPI_Alltoall, MPI_Scatterv, MPI_Gatherv, MPI_Allgatherv and
 * MPI_Alltoallv over MPI_COMM_WORLD, root 0, timed call by call and printed by rank 0 as JSON
 * lines with the keys gaspi-bench uses, "bench" naming the team operation each call matches
 * and "op" the MPI call (without its prefix), so that scripts/bench-gasnet.sh can set them
 * beside the gaspi lines.
 *
 * One source builds against MPICH and Open MPI; the labels come from the command line:
 *
 *     mpiexec -n 4 gasnet LIB TRANSPORT [MAX_ITERS]
 *
 * The operations, sizes (a member's block; in the v forms blocks alternate between half and
 * one and a half of it), iteration counts, warm-up, stamps and the figure (the largest of the
 * ranks' medians) mirror bench/src/gasnet.rs: change both together. MAX_ITERS caps the timed
 * calls per figure (see iterations), for MPIs whose calls are slow when oversubscribed. Exits
 * non-zero when a block arrives with the wrong stamp.
 */
#include "bench.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int SIZES[] = {8, 65536, 1 << 20};
#define LARGEST (1 << 20)
#define ROOT 0

/* How an operation moves blocks between the ranks. */
enum pattern { BROADCAST, SCATTER, GATHER, GATHER_ALL, EXCHANGE };

/* The operations, in the order both sides run them: the team's name, the MPI call's. */
static const struct {
    const char *name, *call;
    enum pattern pattern;
    int v;
} OPS[] = {
    {"broadcast", "bcast", BROADCAST, 0},     {"scatter", "scatter", SCATTER, 0},
    {"gather", "gather", GATHER, 0},          {"gather_all", "allgather", GATHER_ALL, 0},
    {"exchange", "alltoall", EXCHANGE, 0},    {"scatterv", "scatterv", SCATTER, 1},
    {"gatherv", "gatherv", GATHER, 1},        {"gather_allv", "allgatherv", GATHER_ALL, 1},
    {"exchangev", "alltoallv", EXCHANGE, 1},
};
#define NOPS (sizeof OPS / sizeof *OPS)

/* Timed calls for blocks of `bytes`; the warm-up is a tenth of it, plus one. A cap below the
 * count of 8 B blocks (MAX_ITERS, for an oversubscribed host, where a call of an MPI that
 * busy-polls takes milliseconds, of large blocks seconds) is the count of 8 B blocks, and
 * shrinks those of larger blocks alike, to no fewer than 20 (or the cap). */
static int iterations(int bytes, int cap)
{
    int small = 1000, full = bytes <= 8 ? small : bytes <= 65536 ? 300 : 100;
    if (cap >= small)
        return full;
    int scaled = full * cap / small, least = cap < 20 ? cap : 20;
    return scaled > least ? scaled : least;
}

/* Block `k` of a v form whose regular form has blocks of `bytes` (k: a rank, or i + j for
 * the block from i to j). */
static int v_block(int bytes, int k)
{
    return bytes / 2 + (k % 2) * bytes;
}

/* The blocks of a rank's source or destination, packed in order: where each lies, its
 * length, and whom it goes from and to. In rank order where there is one per rank, so that
 * `len` and `at` are the counts and displacements of the v calls. */
struct blocks {
    int n;
    int *at, *len, *from, *to;
};

static void add(struct blocks *b, int len, int from, int to)
{
    b->at[b->n] = b->n ? b->at[b->n - 1] + b->len[b->n - 1] : 0;
    b->len[b->n] = len;
    b->from[b->n] = from;
    b->to[b->n] = to;
    b->n++;
}

/* The blocks of operation `op` in this rank's source and destination (none where the
 * operation does not touch it). */
static void layout(size_t op, int bytes, int me, int ranks, struct blocks *src,
                   struct blocks *dst)
{
    int v = OPS[op].v, root = me == ROOT;
#define LEN(k) (v ? v_block(bytes, (k)) : bytes)
    src->n = dst->n = 0;
    switch (OPS[op].pattern) {
    case BROADCAST:
        if (root)
            add(src, bytes, ROOT, ROOT);
        add(dst, bytes, ROOT, ROOT);
        break;
    case SCATTER:
        for (int j = 0; root && j < ranks; j++)
            add(src, LEN(j), ROOT, j);
        add(dst, LEN(me), ROOT, me);
        break;
    case GATHER:
        add(src, LEN(me), me, ROOT);
        for (int i = 0; root && i < ranks; i++)
            add(dst, LEN(i), i, ROOT);
        break;
    case GATHER_ALL:
        add(src, LEN(me), me, me);
        for (int i = 0; i < ranks; i++)
            add(dst, LEN(i), i, i);
        break;
    case EXCHANGE:
        for (int j = 0; j < ranks; j++)
            add(src, LEN(me + j), me, j);
        for (int i = 0; i < ranks; i++)
            add(dst, LEN(i + me), i, me);
        break;
    }
#undef LEN
}

/* The stamp of a block of `len` bytes sits at its start, and at its end too where the two do
 * not overlap: stamp()'s 8 bytes, or in a block of fewer (a v form's half block of 8 B) its
 * first `len` bytes after folding the round into them, so that a block of another round still
 * shows. Returns how many bytes of `*value` (changed in place) the stamp has. */
static int stamp_bytes(uint64_t *value, int len)
{
    if (len >= 8)
        return 8;
    *value ^= *value >> 32;
    return len;
}

static void mark(char *block, int len, uint64_t value)
{
    int n = stamp_bytes(&value, len);
    memcpy(block, &value, (size_t)n);
    if (len >= 2 * n)
        memcpy(block + len - n, &value, (size_t)n);
}

static int marked(const char *block, int len, uint64_t value)
{
    int n = stamp_bytes(&value, len);
    return memcmp(block, &value, (size_t)n) == 0 &&
           (len < 2 * n || memcmp(block + len - n, &value, (size_t)n) == 0);
}

/* One call of `op` from `src` (blocks `s`) into `dst` (blocks `d`). */
static void call(size_t op, int bytes, char *src, const struct blocks *s, char *dst,
                 const struct blocks *d)
{
    MPI_Comm world = MPI_COMM_WORLD;
    switch (OPS[op].pattern) {
    case BROADCAST:
        /* The root's buffer is its source and its destination: it holds the stamp. */
        MPI_Bcast(dst, bytes, MPI_BYTE, ROOT, world);
        break;
    case SCATTER:
        if (OPS[op].v)
            MPI_Scatterv(src, s->len, s->at, MPI_BYTE, dst, d->len[0], MPI_BYTE, ROOT, world);
        else
            MPI_Scatter(src, bytes, MPI_BYTE, dst, bytes, MPI_BYTE, ROOT, world);
        break;
    case GATHER:
        if (OPS[op].v)
            MPI_Gatherv(src, s->len[0], MPI_BYTE, dst, d->len, d->at, MPI_BYTE, ROOT, world);
        else
            MPI_Gather(src, bytes, MPI_BYTE, dst, bytes, MPI_BYTE, ROOT, world);
        break;
    case GATHER_ALL:
        if (OPS[op].v)
            MPI_Allgatherv(src, s->len[0], MPI_BYTE, dst, d->len, d->at, MPI_BYTE, world);
        else
            MPI_Allgather(src, bytes, MPI_BYTE, dst, bytes, MPI_BYTE, world);
        break;
    case EXCHANGE:
        if (OPS[op].v)
            MPI_Alltoallv(src, s->len, s->at, MPI_BYTE, dst, d->len, d->at, MPI_BYTE, world);
        else
            MPI_Alltoall(src, bytes, MPI_BYTE, dst, bytes, MPI_BYTE, world);
        break;
    }
}

/* Rank 0 prints the largest of the ranks' medians of `samples` (collective). */
static void report(size_t op, const struct job *job, int bytes, double *samples, int iters)
{
    if (!start_line(OPS[op].name, job, bytes, samples, iters, iters))
        return;
    printf(",\"op\":\"%s\"}\n", OPS[op].call);
    fflush(stdout);
}

static int alloc_blocks(struct blocks *b, int ranks)
{
    b->at = malloc((size_t)ranks * sizeof *b->at);
    b->len = malloc((size_t)ranks * sizeof *b->len);
    b->from = malloc((size_t)ranks * sizeof *b->from);
    b->to = malloc((size_t)ranks * sizeof *b->to);
    return b->at && b->len && b->from && b->to;
}

static void free_blocks(struct blocks *b)
{
    free(b->at);
    free(b->len);
    free(b->from);
    free(b->to);
}

int main(int argc, char **argv)
{
    struct job job = start(&argc, &argv);
    int rank = job.rank, ranks = job.ranks;

    /* Buffers for a block of the widest v form from or for every rank. */
    size_t widest = (size_t)v_block(LARGEST, 1), room = widest * (size_t)ranks;
    char *src = calloc(room, 1), *dst = calloc(room, 1);
    double *samples = malloc((size_t)iterations(SIZES[0], job.cap) * sizeof *samples);
    struct blocks s, d;
    if (!src || !dst || !samples || !alloc_blocks(&s, ranks) || !alloc_blocks(&d, ranks)) {
        fprintf(stderr, "gasnet: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int wrong = 0;
    uint64_t round = 0;

    for (size_t op = 0; op < NOPS; op++) {
        for (size_t z = 0; z < sizeof SIZES / sizeof *SIZES; z++) {
            int bytes = SIZES[z], iters = iterations(bytes, job.cap), warmup = iters / 10 + 1;
            layout(op, bytes, rank, ranks, &s, &d);
            /* A broadcast's root stamps its one buffer. */
            char *in = OPS[op].pattern == BROADCAST ? dst : src;
            MPI_Barrier(MPI_COMM_WORLD);
            for (int i = 0; i < warmup + iters; i++) {
                round++;
                for (int k = 0; k < s.n; k++)
                    mark(in + s.at[k], s.len[k], stamp(round, s.from[k], s.to[k]));
                double start = MPI_Wtime();
                call(op, bytes, src, &s, dst, &d);
                double took = MPI_Wtime() - start;
                if (i >= warmup)
                    samples[i - warmup] = took;
                for (int k = 0; k < d.n; k++)
                    wrong |= !marked(dst + d.at[k], d.len[k], stamp(round, d.from[k], d.to[k]));
            }
            report(op, &job, bytes, samples, iters);
        }
    }

    int any_wrong = 0;
    MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (any_wrong && rank == 0)
        fprintf(stderr, "gasnet: %s delivered a block with the wrong stamp\n", job.lib);
    free(src);
    free(dst);
    free(samples);
    free_blocks(&s);
    free_blocks(&d);
    MPI_Finalize();
    return any_wrong ? 1 : 0;
}
