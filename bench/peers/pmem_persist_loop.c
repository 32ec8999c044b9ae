/*
 * The papers' "with PMDK" baseline as a peer for `snbuf bench write --method nt`:
 * threads copy blocks from a DRAM source into their own region of a mapped file with
 * libpmem's pmem_memcpy_persist (copy + drain per block), sequentially with wrap-around,
 * for a fixed duration, and print the throughput. Same layout as snbuf's benchmark:
 * one file, one region per thread, a 64 MiB source per thread, threads pinned.
 *
 * usage: pmem_persist_loop FILE BLOCK_BYTES THREADS SECONDS REGION_BYTES
 * prints: block_bytes threads bytes seconds gib_per_s mops_per_s
 */
#define _GNU_SOURCE
#include <libpmem.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SOURCE_BYTES (64UL << 20)

static char *base;
static size_t block, region;
static atomic_int stop;

struct worker {
	int id;
	uint64_t bytes, ops;
	double seconds;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(w->id % sysconf(_SC_NPROCESSORS_ONLN), &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);

	size_t src_len = SOURCE_BYTES < region ? SOURCE_BYTES : region;
	char *src = aligned_alloc(4096, src_len);
	for (size_t i = 0; i < src_len; i++)
		src[i] = (char)(i * 131 + w->id);
	char *dst = base + (size_t)w->id * region;
	size_t slots = region / block, slot = 0, src_off = 0;
	double t0 = now();
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		pmem_memcpy_persist(dst + slot * block, src + src_off, block);
		if (++slot == slots)
			slot = 0;
		src_off += block;
		if (src_off > src_len - block)
			src_off = 0;
		w->bytes += block;
		w->ops++;
	}
	w->seconds = now() - t0;
	free(src);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s FILE BLOCK_BYTES THREADS SECONDS REGION_BYTES\n", argv[0]);
		return 2;
	}
	block = strtoul(argv[2], NULL, 10);
	int threads = atoi(argv[3]);
	double seconds = atof(argv[4]);
	region = strtoul(argv[5], NULL, 10);
	size_t mapped_len;
	int is_pmem;
	base = pmem_map_file(argv[1], region * threads, PMEM_FILE_CREATE, 0644, &mapped_len, &is_pmem);
	if (!base) {
		perror("pmem_map_file");
		return 1;
	}
	/* Prefault outside the timed region, as snbuf does. */
	for (size_t i = 0; i < mapped_len; i += 4096)
		base[i] = 0;
	pthread_t tid[threads];
	struct worker w[threads];
	/* Warm-up of 0.5 s is folded into a first short run, then the timed one. */
	for (int pass = 0; pass < 2; pass++) {
		atomic_store(&stop, 0);
		for (int i = 0; i < threads; i++) {
			memset(&w[i], 0, sizeof(w[i]));
			w[i].id = i;
			pthread_create(&tid[i], NULL, run, &w[i]);
		}
		struct timespec d = {.tv_sec = pass ? (time_t)seconds : 0,
				     .tv_nsec = pass ? (long)((seconds - (time_t)seconds) * 1e9) : 500000000L};
		nanosleep(&d, NULL);
		atomic_store(&stop, 1);
		for (int i = 0; i < threads; i++)
			pthread_join(tid[i], NULL);
	}
	uint64_t bytes = 0, ops = 0;
	double secs = 0;
	for (int i = 0; i < threads; i++) {
		bytes += w[i].bytes;
		ops += w[i].ops;
		if (w[i].seconds > secs)
			secs = w[i].seconds;
	}
	printf("%zu %d %lu %.6f %.6f %.6f\n", block, threads, bytes, secs,
	       bytes / secs / (1UL << 30), ops / secs / 1e6);
	pmem_unmap(base, mapped_len);
	return 0;
}
