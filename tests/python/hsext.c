/* A tiny C extension for mixed-stack tests: Python -> C (this file) -> Python. */
#include <Python.h>

static volatile unsigned long sink;

/* Burns a little CPU in C, then calls the Python callable it was given. */
static PyObject *call_back(PyObject *self, PyObject *args)
{
	PyObject *f;
	unsigned long i;

	if (!PyArg_ParseTuple(args, "O", &f))
		return NULL;
	for (i = 0; i < 200000; i++)
		sink += i;
	return PyObject_CallObject(f, NULL);
}

static PyMethodDef methods[] = {
	{"call_back", call_back, METH_VARARGS, "call f() from C"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hsext", NULL, -1, methods};

PyMODINIT_FUNC PyInit_hsext(void)
{
	return PyModule_Create(&module);
}
