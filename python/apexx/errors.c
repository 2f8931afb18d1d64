/* SPDX-License-Identifier: Apache-2.0 */
/* apexx._apexx: library text as str, and the exception of each status
 * (the classes apexx/__init__.py registers through _set_hooks). */
#include "binding.h"

#include <stdarg.h>
#include <string.h>

PyObject *apxpy_error_classes[APXPY_STATUS_COUNT];

/* Messages, paths, names from files: UTF-8, with any other byte as a \xNN
 * escape, so that no text raises UnicodeDecodeError (a Latin-1 path, a
 * tensor name from a file, a message cut inside a character). */
PyObject *apxpy_text_of(const char *s) {
  if (!s) s = "";
  return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "backslashreplace");
}

PyObject *apxpy_raise_status(apx_status st, const char *message) {
  PyObject *cls = ((int)st > 0 && (int)st < APXPY_STATUS_COUNT && apxpy_error_classes[st])
                      ? apxpy_error_classes[st]
                      : (apxpy_error_classes[0] ? apxpy_error_classes[0] : PyExc_RuntimeError);
  PyObject *text = apxpy_text_of(message);
  if (!text) return NULL;
  PyObject *exc = PyObject_CallFunction(cls, "iO", (int)st, text);
  Py_DECREF(text);
  if (exc) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return NULL;
}

PyObject *apxpy_raise_apx(apx_status st) { return apxpy_raise_status(st, apx_last_error()); }

PyObject *apxpy_raise_invalid(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (!apxpy_error_classes[APX_ERR_INVALID_ARG]) {
    PyErr_SetString(PyExc_ValueError, buf);
    return NULL;
  }
  return apxpy_raise_status(APX_ERR_INVALID_ARG, buf);
}
