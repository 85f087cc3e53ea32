/* prism._launcher: launch every kernel of a bound graph in one call from Python.
 *
 * make(steps) -> capsule, once per bound graph. A step is a tuple:
 *   ("kernel", function, gx, gy, gz, threads, shared, params)
 * where params lists the kernel's runtime parameters in order, each ("ptr", slot), ("i32", value) or
 * ("i64", value); two null scratch pointers follow them, as Triton's own launchers pass.
 * run(capsule, stream, addresses) launches the steps on `stream`, reading buffer addresses from the
 * tuple `addresses` (ints, indexed by slot).
 *
 * libcuda is opened on first use, so the module imports on machines without a GPU driver.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "cuda.h"

typedef CUresult (*cu_launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
typedef CUresult (*cu_error_fn)(CUresult, const char **);

static cu_launch_fn cu_launch = NULL;
static cu_error_fn cu_error = NULL;

static int load_driver(void) {
  if (cu_launch) return 1;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    PyErr_SetString(PyExc_RuntimeError, "prism launcher: cannot open libcuda");
    return 0;
  }
  cu_error = (cu_error_fn)dlsym(lib, "cuGetErrorString");
  cu_launch = (cu_launch_fn)dlsym(lib, "cuLaunchKernel");
  if (!cu_launch || !cu_error) {
    cu_launch = NULL;
    PyErr_SetString(PyExc_RuntimeError, "prism launcher: libcuda lacks cuLaunchKernel or cuGetErrorString");
    return 0;
  }
  return 1;
}

static int check(CUresult status, const char *what) {
  if (status == CUDA_SUCCESS) return 1;
  const char *text = "unknown error";
  cu_error(status, &text);
  PyErr_Format(PyExc_RuntimeError, "prism launcher: %s failed: %s", what, text);
  return 0;
}

enum { PARAM_PTR, PARAM_I32, PARAM_I64 };

typedef struct {
  int kind;
  Py_ssize_t slot;
  union { int32_t i32; int64_t i64; uint64_t ptr; } value;
} Param;

typedef struct {
  CUfunction function;
  unsigned grid[3], threads, shared;
  Py_ssize_t nparams;   /* runtime parameters, scratch pointers excluded */
  Param *params;
  void **pointers;      /* nparams + 2 pointers into params (and the scratch slots) */
  uint64_t scratch[2];
} Step;

typedef struct {
  Py_ssize_t nsteps;
  Step *steps;
} Plan;

static void free_plan(PyObject *capsule) {
  Plan *plan = (Plan *)PyCapsule_GetPointer(capsule, "prism.plan");
  if (!plan) return;
  for (Py_ssize_t i = 0; i < plan->nsteps; i++) {
    PyMem_Free(plan->steps[i].params);
    PyMem_Free(plan->steps[i].pointers);
  }
  PyMem_Free(plan->steps);
  PyMem_Free(plan);
}

static int parse_param(PyObject *item, Param *p) {
  const char *kind;
  PyObject *value;
  if (!PyArg_ParseTuple(item, "sO", &kind, &value)) return 0;
  if (strcmp(kind, "ptr") == 0) {
    p->kind = PARAM_PTR;
    p->slot = PyLong_AsSsize_t(value);
  } else if (strcmp(kind, "i32") == 0) {
    p->kind = PARAM_I32;
    p->value.i32 = (int32_t)PyLong_AsLong(value);
  } else if (strcmp(kind, "i64") == 0) {
    p->kind = PARAM_I64;
    p->value.i64 = (int64_t)PyLong_AsLongLong(value);
  } else {
    PyErr_Format(PyExc_ValueError, "prism launcher: unknown parameter kind %s", kind);
    return 0;
  }
  return !PyErr_Occurred();
}

static int parse_step(PyObject *item, Step *s) {
  const char *kind;
  unsigned long long function;
  PyObject *params;
  if (!PyArg_ParseTuple(item, "sKIIIIIO!", &kind, &function, &s->grid[0], &s->grid[1], &s->grid[2],
                        &s->threads, &s->shared, &PyTuple_Type, &params))
    return 0;
  s->function = (CUfunction)(uintptr_t)function;
  s->nparams = PyTuple_GET_SIZE(params);
  s->params = PyMem_Calloc(s->nparams ? s->nparams : 1, sizeof(Param));
  s->pointers = PyMem_Calloc(s->nparams + 2, sizeof(void *));
  if (!s->params || !s->pointers) {
    PyErr_NoMemory();
    return 0;
  }
  for (Py_ssize_t i = 0; i < s->nparams; i++) {
    if (!parse_param(PyTuple_GET_ITEM(params, i), &s->params[i])) return 0;
    s->pointers[i] = &s->params[i].value;
  }
  s->scratch[0] = s->scratch[1] = 0;
  s->pointers[s->nparams] = &s->scratch[0];
  s->pointers[s->nparams + 1] = &s->scratch[1];
  return 1;
}

static PyObject *make(PyObject *self, PyObject *args) {
  PyObject *steps;
  if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &steps)) return NULL;
  Plan *plan = PyMem_Calloc(1, sizeof(Plan));
  if (!plan) return PyErr_NoMemory();
  plan->nsteps = PyTuple_GET_SIZE(steps);
  plan->steps = PyMem_Calloc(plan->nsteps ? plan->nsteps : 1, sizeof(Step));
  PyObject *capsule = plan->steps ? PyCapsule_New(plan, "prism.plan", free_plan) : NULL;
  if (!capsule) {
    PyMem_Free(plan->steps);
    PyMem_Free(plan);
    return PyErr_Occurred() ? NULL : PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < plan->nsteps; i++) {
    if (!parse_step(PyTuple_GET_ITEM(steps, i), &plan->steps[i])) {
      Py_DECREF(capsule);
      return NULL;
    }
  }
  return capsule;
}

static PyObject *run(PyObject *self, PyObject *args) {
  PyObject *capsule, *addresses;
  unsigned long long stream;
  if (!PyArg_ParseTuple(args, "OKO!", &capsule, &stream, &PyTuple_Type, &addresses)) return NULL;
  Plan *plan = (Plan *)PyCapsule_GetPointer(capsule, "prism.plan");
  if (!plan || !load_driver()) return NULL;
  Py_ssize_t naddr = PyTuple_GET_SIZE(addresses);
  for (Py_ssize_t i = 0; i < plan->nsteps; i++) {
    Step *s = &plan->steps[i];
    for (Py_ssize_t j = 0; j < s->nparams; j++) {
      Param *p = &s->params[j];
      if (p->kind != PARAM_PTR) continue;
      if (p->slot >= naddr) return PyErr_Format(PyExc_IndexError, "prism launcher: no address %zd", p->slot);
      p->value.ptr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(addresses, p->slot));
      if (PyErr_Occurred()) return NULL;
    }
    if (!check(cu_launch(s->function, s->grid[0], s->grid[1], s->grid[2], s->threads, 1, 1, s->shared,
                         (CUstream)(uintptr_t)stream, s->pointers, NULL), "cuLaunchKernel"))
      return NULL;
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"make", make, METH_VARARGS, "make(steps) -> a plan capsule (see the module comment)"},
    {"run", run, METH_VARARGS, "run(plan, stream, addresses): launch a plan's steps on a stream"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_prism_launcher", NULL, -1, methods};

PyMODINIT_FUNC PyInit__prism_launcher(void) { return PyModule_Create(&module); }
