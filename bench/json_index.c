/* SPDX-License-Identifier: Apache-2.0 */
/* Hashed lookups for the report readers (bench.h, "lookups"): cJSON finds
 * an object's member by walking its children, so compare's lookup of every
 * metric in a section of N entries, and history's of every row key in
 * every run, took time in N squared. One open-addressing table keyed by
 * (scope pointer, name) holds the members of each large object and any
 * set of names a reader keeps. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

/* an object with more members than this is indexed; smaller ones are
 * searched as cJSON does */
#define INDEX_MIN_MEMBERS 8

enum { SLOT_NAME = 1, SLOT_INDEXED = 2 };

struct bench_index_slot {
  const void *scope;
  const char *name; /* NULL in an object's "indexed" mark */
  const void *value;
  uint64_t hash;
  int kind; /* 0: empty */
};

static uint64_t hash_of(const void *scope, const char *name, int kind) {
  uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)(name ? name : ""); *p; p++) {
    h ^= *p;
    h *= UINT64_C(0x100000001b3);
  }
  uint64_t s = (uint64_t)(uintptr_t)scope * UINT64_C(0x9e3779b97f4a7c15);
  h ^= s ^ (s >> 29) ^ (uint64_t)kind;
  h *= UINT64_C(0xbf58476d1ce4e5b9);
  return h ^ (h >> 31);
}

void bench_index_init(bench_index *ix) { memset(ix, 0, sizeof *ix); }

void bench_index_free(bench_index *ix) {
  free(ix->slots);
  memset(ix, 0, sizeof *ix);
}

static struct bench_index_slot *find_slot(const bench_index *ix, const void *scope,
                                          const char *name, int kind, uint64_t hash) {
  if (!ix->cap)
    return NULL;
  size_t mask = ix->cap - 1;
  for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
    struct bench_index_slot *s = &ix->slots[i];
    if (!s->kind)
      return s;
    if (s->hash == hash && s->kind == kind && s->scope == scope &&
        (kind == SLOT_INDEXED || strcmp(s->name, name) == 0)) {
      return s;
    }
  }
}

static int grow(bench_index *ix) {
  size_t cap = ix->cap ? ix->cap * 2 : 64;
  struct bench_index_slot *old = ix->slots, *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return -1;
  size_t old_cap = ix->cap;
  ix->slots = slots;
  ix->cap = cap;
  for (size_t i = 0; i < old_cap; i++) {
    if (old[i].kind)
      *find_slot(ix, old[i].scope, old[i].name, old[i].kind, old[i].hash) = old[i];
  }
  free(old);
  return 0;
}

static int put(bench_index *ix, const void *scope, const char *name, int kind, const void *value) {
  if ((ix->count + 1) * 2 > ix->cap && grow(ix) != 0)
    return -1;
  uint64_t hash = hash_of(scope, name, kind);
  struct bench_index_slot *s = find_slot(ix, scope, name, kind, hash);
  if (s->kind)
    return 0; /* held already: the first one stays */
  s->scope = scope;
  s->name = name;
  s->value = value;
  s->hash = hash;
  s->kind = kind;
  ix->count++;
  return 1;
}

int bench_index_add(bench_index *ix, const void *scope, const char *name, const void *value) {
  return put(ix, scope, name, SLOT_NAME, value);
}

const void *bench_index_find(const bench_index *ix, const void *scope, const char *name) {
  struct bench_index_slot *s =
      find_slot(ix, scope, name, SLOT_NAME, hash_of(scope, name, SLOT_NAME));
  return s && s->kind ? s->value : NULL;
}

int bench_index_tree(bench_index *ix, const cJSON *node) {
  if (!cJSON_IsObject(node) && !cJSON_IsArray(node))
    return 0;
  int members = 0;
  const cJSON *child;
  cJSON_ArrayForEach(child, node) { members++; }
  if (cJSON_IsObject(node) && members > INDEX_MIN_MEMBERS) {
    cJSON_ArrayForEach(child, node) {
      if (child->string && put(ix, node, child->string, SLOT_NAME, child) < 0)
        return -1;
    }
    if (put(ix, node, NULL, SLOT_INDEXED, node) < 0)
      return -1;
  }
  cJSON_ArrayForEach(child, node) {
    if (bench_index_tree(ix, child) != 0)
      return -1;
  }
  return 0;
}

const cJSON *bench_index_member(const bench_index *ix, const cJSON *obj, const char *key) {
  if (!cJSON_IsObject(obj) || !key)
    return NULL;
  if (ix && ix->count) {
    struct bench_index_slot *mark =
        find_slot(ix, obj, NULL, SLOT_INDEXED, hash_of(obj, NULL, SLOT_INDEXED));
    if (mark && mark->kind)
      return bench_index_find(ix, obj, key);
  }
  return cJSON_GetObjectItemCaseSensitive(obj, key);
}
