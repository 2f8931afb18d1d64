/* SPDX-License-Identifier: Apache-2.0 */
/* The prepared data backends keep with a core object (services.cache,
 * include/apexx/backend.h): per object, a list of entries keyed by (the
 * backend that made it, a key the backend chose), made once under the
 * object's lock and released when the object is freed or the backend
 * finalised. The objects are the FF weights handles (libapexx/ff/). */
#include "config.h"

#include <stdlib.h>

#include "internal.h"

struct apx__cache_entry {
  void *core; /* the apx__backend that made it */
  uint64_t key;
  void *prepared;
  void (*release)(void *state, uint64_t key, void *prepared);
  void *state;
  struct apx__cache_entry *next;
};

void apx__object_init(apx__object *o, const void *content) {
  o->content = content;
  o->entries = NULL;
  pthread_mutex_init(&o->lock, NULL);
}

/* Move every entry (of `core`, or all with core NULL) onto the front of
 * list; the caller releases the list outside the locks. */
apx__cache_entry *apx__object_take(apx__object *o, void *core, apx__cache_entry *list) {
  pthread_mutex_lock(&o->lock);
  for (apx__cache_entry **p = &o->entries; *p;) {
    apx__cache_entry *e = *p;
    if (!core || e->core == core) {
      *p = e->next;
      e->next = list;
      list = e;
    } else {
      p = &e->next;
    }
  }
  pthread_mutex_unlock(&o->lock);
  return list;
}

void apx__cache_release(apx__cache_entry *list) {
  while (list) {
    apx__cache_entry *next = list->next;
    if (list->release)
      list->release(list->state, list->key, list->prepared);
    free(list);
    list = next;
  }
}

void apx__object_destroy(apx__object *o) {
  apx__cache_release(apx__object_take(o, NULL, NULL));
  pthread_mutex_destroy(&o->lock);
}

apx_status apx__object_cache(apx__object *o, void *core, uint64_t key,
                             apx_status (*make)(void *state, const void *content, uint64_t key,
                                                void **prepared),
                             void (*release)(void *state, uint64_t key, void *prepared),
                             void *state, void **prepared) {
  if (!core)
    return apx__error(APX_ERR_INVALID_ARG, "cache: core = [NULL]");
  if (!o)
    return apx__error(APX_ERR_INVALID_ARG, "cache: object = [NULL]");
  if (!make)
    return apx__error(APX_ERR_INVALID_ARG, "cache: make = [NULL]");
  if (!prepared)
    return apx__error(APX_ERR_INVALID_ARG, "cache: prepared = [NULL]");
  *prepared = NULL;
  apx_status st = APX_OK;
  pthread_mutex_lock(&o->lock);
  apx__cache_entry *e = o->entries;
  while (e && !(e->core == core && e->key == key))
    e = e->next;
  if (e) {
    *prepared = e->prepared;
  } else {
    void *made = NULL;
    st = make(state, o->content, key, &made);
    if (st == APX_OK) {
      e = malloc(sizeof *e);
      if (!e) {
        if (release)
          release(state, key, made);
        st = apx__error(APX_ERR_NO_MEMORY, "cache: out of memory");
      } else {
        *e = (apx__cache_entry){core, key, made, release, state, o->entries};
        o->entries = e;
        *prepared = made;
      }
    }
  }
  pthread_mutex_unlock(&o->lock);
  return st;
}
