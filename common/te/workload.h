/*
 * Workloads: the JSON form users write (README, "Workload JSON"), parsed into
 * a compute DAG built by the operator library (ops.h), with its canonical
 * JSON, flop count and stable workload key ["<hash>", [shape], ...].
 *
 * Ownership: a kt_workload_t owns its DAG and strings; kt_workload_free()
 * releases all (accepts NULL). Immutable after creation: any thread may read.
 */
#ifndef KT_TE_WORKLOAD_H
#define KT_TE_WORKLOAD_H

#include "te.h"

typedef struct kt_workload kt_workload_t;

/* Parse one workload object from JSON text. NULL + kt_err naming the field on
 * bad JSON, unknown op, missing field or inconsistent shapes. */
kt_workload_t *kt_workload_parse(const char *json_text);

/* Load workloads from `arg`: inline JSON (starts with '{' or '[') or a file
 * path. Accepts one workload object, or a list whose items are workload
 * objects or {"workload": {...}, "weight": W}. On success *out and *weights
 * are malloc'd arrays of *n entries (caller frees each workload, then both
 * arrays); weights default to 1. */
int kt_workload_load(const char *arg, kt_workload_t ***out, double **weights, int *n);

void kt_workload_free(kt_workload_t *w);

const kt_dag_t *kt_workload_dag(const kt_workload_t *w);
const char *kt_workload_op(const kt_workload_t *w);    /* "matmul" */
const char *kt_workload_key(const kt_workload_t *w);   /* ["<hash>", [512, 512], ...] */
const char *kt_workload_json(const kt_workload_t *w);  /* canonical JSON (sorted keys) */
double kt_workload_flops(const kt_workload_t *w);

#endif
