/*
 * Helpers shared by the measure module's sources; not installed, not API.
 */
#ifndef KT_MEASURE_MEASURE_INT_H
#define KT_MEASURE_MEASURE_INT_H

#include <stddef.h>

/* "signal 11 (SIGSEGV, Segmentation fault)" into buf. */
void kt_measure_signal_text(int sig, char *buf, size_t n);

/* Split s on blanks into a NULL-terminated, malloc'd argv whose strings are
 * malloc'd; *argc gets the count. NULL (kt_err set) when out of memory. */
char **kt_measure_split_words(const char *s, int *argc);
void kt_measure_free_words(char **words);

#endif
