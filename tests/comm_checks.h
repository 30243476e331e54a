/* The communicator checks every implementation must pass: each collective
 * on real values against plain C, for one rank of a communicator (the
 * in-process test runs them on threads, the MPI test on processes). */
#ifndef LOOM_TESTS_COMM_CHECKS_H
#define LOOM_TESTS_COMM_CHECKS_H

#include "comm/comm.h"

/* Runs every check on this rank; returns the number of failures (printed
 * to stderr with the rank) and adds the number of checks to *checks. */
int comm_check_all(loom_comm *c, loom_ctx *ctx, int *checks);

#endif
