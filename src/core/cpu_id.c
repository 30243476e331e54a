/*
 * The CPU's identity (cpu_id.h).
 */
#include "core/cpu_id.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__linux__)
#include <sys/auxv.h>
#endif

static char identity[2048];
static pthread_once_t identity_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
static void describe(char *out, size_t n) {
  unsigned a = 0, b = 0, c = 0, d = 0, max = 0, max_ext = 0;
  char vendor[13] = "";
  __cpuid(0, max, b, c, d);
  memcpy(vendor, &b, 4);
  memcpy(vendor + 4, &d, 4);
  memcpy(vendor + 8, &c, 4);
  char brand[49] = "";
  __cpuid(0x80000000u, max_ext, b, c, d);
  if (max_ext >= 0x80000004u)
    for (unsigned i = 0; i < 3; i++) {
      unsigned r[4];
      __cpuid(0x80000002u + i, r[0], r[1], r[2], r[3]);
      memcpy(brand + 16 * i, r, 16);
    }
  /* Leaf 1's EBX holds the APIC id (it differs between cores): left out. */
  unsigned sig = 0, f1c = 0, f1d = 0;
  if (max >= 1) __cpuid(1, sig, b, f1c, f1d);
  unsigned f7b = 0, f7c = 0, f7d = 0, f71a = 0;
  if (max >= 7) {
    __cpuid_count(7, 0, a, f7b, f7c, f7d);
    if (a >= 1) __cpuid_count(7, 1, f71a, b, c, d);
  }
  unsigned e1c = 0, e1d = 0;
  if (max_ext >= 0x80000001u) __cpuid(0x80000001u, a, b, e1c, e1d);
  /* Which register files the OS saves (AVX, AVX-512 usable or not). */
  uint64_t xcr0 = 0;
  if (f1c & (1u << 27)) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (uint64_t)hi << 32 | lo;
  }
  snprintf(out, n,
           "x86 %s | %s | sig %08x | 1:%08x,%08x | 7:%08x,%08x,%08x | 7.1:%08x | "
           "ext:%08x,%08x | xcr0 %016llx",
           vendor, brand, sig, f1c, f1d, f7b, f7c, f7d, f71a, e1c, e1d,
           (unsigned long long)xcr0);
}
#else
/* Appends the first line of /proc/cpuinfo starting with each key. */
static void add_cpuinfo(char *out, size_t n) {
  static const char *const keys[] = {"model name", "cpu model", "Features", "flags",
                                     "CPU implementer", "CPU architecture", "CPU variant",
                                     "CPU part", "CPU revision", "isa", "uarch", "cpu"};
  bool seen[sizeof keys / sizeof keys[0]] = {false};
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
      size_t k = strlen(keys[i]);
      if (seen[i] || strncmp(line, keys[i], k) != 0 || (line[k] != ' ' && line[k] != '\t' &&
                                                        line[k] != ':'))
        continue;
      seen[i] = true;
      line[strcspn(line, "\n")] = '\0';
      size_t l = strlen(out);
      snprintf(out + l, n - l, " | %s", line);
    }
  }
  fclose(f);
}

static void describe(char *out, size_t n) {
  snprintf(out, n, "%s", "cpu");
#if defined(__linux__)
  size_t l = strlen(out);
  unsigned long hw2 = 0;
#ifdef AT_HWCAP2
  hw2 = getauxval(AT_HWCAP2);
#endif
  snprintf(out + l, n - l, " | hwcap %lx,%lx", getauxval(AT_HWCAP), hw2);
#endif
  add_cpuinfo(out, n);
}
#endif

static void compute(void) { describe(identity, sizeof identity); }

const char *loom_cpu_identity(void) {
  pthread_once(&identity_once, compute);
  return identity;
}
