/* The per-line loops of `mqlens store load`, compiled: reading input lines of the common shape
 * and formatting result lines.
 *
 * The Python code holds the reference of both (app/ndjson_parse.py's parse_load_line and
 * app/ndjson_load.py's RESULT_LINE) and says what a line means; these loops give the same
 * messages and the same text without the interpreter's work per line. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define PUT_RESULT_FIELDS 8 /* topic, queue id, queue offset, phys offset, size, unique key, store time, host */
#define LINE_ROOM 256 /* room for a line's fixed text and numbers, made before writing them */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Out;

static int out_reserve(Out *out, Py_ssize_t more)
{
    if (out->len + more <= out->cap)
        return 0;
    Py_ssize_t cap = out->cap * 2 > out->len + more ? out->cap * 2 : out->len + more;
    char *data = PyMem_Realloc(out->data, (size_t)cap);
    if (!data) {
        PyErr_NoMemory();
        return -1;
    }
    out->data = data;
    out->cap = cap;
    return 0;
}

static void put_bytes(Out *out, const char *text, Py_ssize_t len)
{
    memcpy(out->data + out->len, text, (size_t)len);
    out->len += len;
}

#define PUT_LITERAL(out, text) put_bytes(out, text, (Py_ssize_t)(sizeof(text) - 1))

static void put_int(Out *out, long long value)
{
    char digits[24];
    int n = 0;
    unsigned long long magnitude = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    do {
        digits[n++] = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (value < 0)
        out->data[out->len++] = '-';
    while (n)
        out->data[out->len++] = digits[--n];
}

static void put_hex16(Out *out, unsigned long long value)
{
    static const char hex[] = "0123456789ABCDEF";
    for (int shift = 60; shift >= 0; shift -= 4)
        out->data[out->len++] = hex[(value >> shift) & 0xF];
}

static void put_text(Out *out, PyObject *ascii_text)
{
    put_bytes(out, (const char *)PyUnicode_1BYTE_DATA(ascii_text), PyUnicode_GET_LENGTH(ascii_text));
}

/* `text` as a JSON string: quoted as it is when it is printable ASCII without a quote or a
 * backslash, otherwise as `json_string` (the reference escaper) writes it. */
static int put_json_text(Out *out, PyObject *text, PyObject *json_string, const char *what)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "a result's %s must be text", what);
        return -1;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), i = 0;
    if (PyUnicode_IS_ASCII(text)) {
        const unsigned char *chars = PyUnicode_1BYTE_DATA(text);
        while (i < n && chars[i] >= 0x20 && chars[i] < 0x7F && chars[i] != '"' && chars[i] != '\\')
            i++;
    }
    if (n > 0 && i == n) {
        if (out_reserve(out, n + 2) < 0)
            return -1;
        out->data[out->len++] = '"';
        put_text(out, text);
        out->data[out->len++] = '"';
        return 0;
    }
    PyObject *quoted = PyObject_CallOneArg(json_string, text);
    int failed = !quoted || !PyUnicode_Check(quoted) || !PyUnicode_IS_ASCII(quoted);
    if (quoted && failed)
        PyErr_SetString(PyExc_TypeError, "json_string must give ASCII text");
    if (!failed && (failed = out_reserve(out, PyUnicode_GET_LENGTH(quoted)) < 0) == 0)
        put_text(out, quoted);
    Py_XDECREF(quoted);
    return failed ? -1 : 0;
}

PyDoc_STRVAR(result_lines_doc,
"result_lines(numbers, results, host_prefix, json_string) -> bytes\n\n"
"One JSON line per (line number, PutResult) pair, each ending in a newline, as\n"
"app.ndjson_load.RESULT_LINE formats it. host_prefix(host) gives an offset message id without\n"
"its 16 offset digits; json_string(text) quotes a topic or unique key that is not plain\n"
"printable ASCII.");

static PyObject *result_lines(PyObject *self, PyObject *args)
{
    PyObject *numbers_arg, *results, *host_prefix, *json_string;
    if (!PyArg_ParseTuple(args, "OO!OO", &numbers_arg, &PyList_Type, &results, &host_prefix, &json_string))
        return NULL;
    PyObject *numbers = PySequence_Fast(numbers_arg, "numbers must be a sequence");
    if (!numbers)
        return NULL;
    PyObject *result = NULL, *last_host = NULL, *prefix = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(numbers);
    if (PyList_GET_SIZE(results) < n)
        n = PyList_GET_SIZE(results); /* results stop short of a refused message */
    Out out = {NULL, 0, 0};
    if (out_reserve(&out, n * 256 + LINE_ROOM) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(results, i);
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != PUT_RESULT_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "results must be PutResult tuples");
            goto done;
        }
        PyObject *unique_key = PyTuple_GET_ITEM(r, 5), *host = PyTuple_GET_ITEM(r, 7);
        long long fields[5] = {
            PyLong_AsLongLong(PySequence_Fast_GET_ITEM(numbers, i)), PyLong_AsLongLong(PyTuple_GET_ITEM(r, 1)),
            PyLong_AsLongLong(PyTuple_GET_ITEM(r, 2)), PyLong_AsLongLong(PyTuple_GET_ITEM(r, 3)),
            PyLong_AsLongLong(PyTuple_GET_ITEM(r, 6))};
        if (PyErr_Occurred())
            goto done;
        if (host != last_host) {
            Py_XSETREF(prefix, PyObject_CallOneArg(host_prefix, host));
            if (!prefix)
                goto done;
            if (!PyUnicode_Check(prefix) || !PyUnicode_IS_ASCII(prefix)) {
                PyErr_SetString(PyExc_TypeError, "host_prefix must give ASCII text");
                goto done;
            }
            last_host = host;
        }
        if (out_reserve(&out, LINE_ROOM) < 0)
            goto done;
        PUT_LITERAL(&out, "{\"line\": ");
        put_int(&out, fields[0]);
        PUT_LITERAL(&out, ", \"topic\": ");
        if (put_json_text(&out, PyTuple_GET_ITEM(r, 0), json_string, "topic") < 0 || out_reserve(&out, LINE_ROOM) < 0)
            goto done;
        PUT_LITERAL(&out, ", \"queue_id\": ");
        put_int(&out, fields[1]);
        PUT_LITERAL(&out, ", \"queue_offset\": ");
        put_int(&out, fields[2]);
        PUT_LITERAL(&out, ", \"phys_offset\": ");
        put_int(&out, fields[3]);
        PUT_LITERAL(&out, ", \"offset_msg_id\": \"");
        if (out_reserve(&out, PyUnicode_GET_LENGTH(prefix) + LINE_ROOM) < 0)
            goto done;
        put_text(&out, prefix);
        put_hex16(&out, (unsigned long long)fields[3]);
        PUT_LITERAL(&out, "\", \"unique_key\": ");
        if (unique_key == Py_None)
            PUT_LITERAL(&out, "null");
        else if (put_json_text(&out, unique_key, json_string, "unique key") < 0 || out_reserve(&out, LINE_ROOM) < 0)
            goto done;
        PUT_LITERAL(&out, ", \"store_timestamp\": ");
        put_int(&out, fields[4]);
        PUT_LITERAL(&out, "}\n");
    }
    result = PyBytes_FromStringAndSize(out.data, out.len);
done:
    PyMem_Free(out.data);
    Py_XDECREF(prefix);
    Py_DECREF(numbers);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* read_common                                                                               */

enum { F_TOPIC, F_BODY_BASE64, F_BODY, F_TAGS, F_KEYS, F_QUEUE_ID, F_UNIQUE_KEY, F_COUNT };
static const char *const COMMON_NAMES[F_COUNT] = {"topic", "body_base64", "body", "tags", "keys", "queue_id",
                                                   "unique_key"};
#define MESSAGE_TUPLE 11 /* NewMessage's first fields, as app.ndjson_parse.FIELDS lists them */

/* The message tuple of a parsed line of the common shape; NULL with no error set when the line
 * is of another shape (the caller's full rule reads it), NULL with an error set on failure. */
static PyObject *common_message(PyObject *data, PyObject *const *names, PyObject *same, PyObject *decode,
                                PyObject *decode_kwargs)
{
    if (!PyDict_CheckExact(data))
        return NULL;
    PyObject *f[F_COUNT] = {NULL};
    Py_ssize_t found = 0;
    for (int i = 0; i < F_COUNT; i++) {
        f[i] = PyDict_GetItemWithError(data, names[i]);
        if (f[i])
            found++;
        else if (PyErr_Occurred())
            return NULL;
    }
    if (found != PyDict_GET_SIZE(data) || !f[F_TOPIC] || !PyUnicode_CheckExact(f[F_TOPIC]))
        return NULL;
    PyObject *keys = f[F_KEYS], *queue_id = f[F_QUEUE_ID], *unique_key = f[F_UNIQUE_KEY], *tags = f[F_TAGS];
    if (keys) {
        if (!PyList_CheckExact(keys))
            return NULL;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++)
            if (!PyUnicode_CheckExact(PyList_GET_ITEM(keys, i)))
                return NULL;
    }
    if ((queue_id && !PyLong_CheckExact(queue_id)) || (unique_key && unique_key != Py_None && !PyUnicode_CheckExact(unique_key)))
        return NULL;
    PyObject *body;
    if (f[F_BODY_BASE64]) {
        PyObject *args[1] = {f[F_BODY_BASE64]};
        body = PyObject_VectorcallDict(decode, args, 1, decode_kwargs);
    } else if (f[F_BODY] && PyUnicode_CheckExact(f[F_BODY])) {
        body = PyUnicode_AsUTF8String(f[F_BODY]);
    } else {
        return NULL;
    }
    if (!body)
        return NULL;
    PyObject *topic = PyDict_SetDefault(same, f[F_TOPIC], f[F_TOPIC]);
    if (!tags)
        tags = Py_None;
    else if (tags != Py_None && topic)
        tags = PyDict_SetDefault(same, tags, tags); /* NULL for a value that cannot be a key */
    PyObject *props = NULL, *key_list = NULL, *message = NULL;
    if (topic && tags && (props = PyDict_New()) && (key_list = keys ? Py_NewRef(keys) : PyList_New(0)))
        message = PyTuple_New(MESSAGE_TUPLE);
    if (!message) {
        Py_DECREF(body);
        Py_XDECREF(props);
        Py_XDECREF(key_list);
        return NULL;
    }
    PyObject *zero = PyLong_FromLong(0);
    PyObject *items[MESSAGE_TUPLE] = {Py_NewRef(topic), body, Py_NewRef(tags), key_list, props,
                                      Py_NewRef(queue_id ? queue_id : Py_None), Py_NewRef(Py_None),
                                      Py_NewRef(Py_None), Py_NewRef(zero), zero,
                                      Py_NewRef(unique_key ? unique_key : Py_None)};
    for (int i = 0; i < MESSAGE_TUPLE; i++)
        PyTuple_SET_ITEM(message, i, items[i]);
    return message;
}

PyDoc_STRVAR(read_common_doc,
"read_common(lines, start, messages, same, loads, b64decode) -> int\n\n"
"Appends to `messages` the message tuple of each line from lines[start] on that is of the\n"
"common shape (app.ndjson_parse.parse_lines says which), read by loads and b64decode(...,\n"
"validate=True), with topics and tags made one object per value through the dict `same`.\n"
"Returns the index of the first line it did not read (len(lines) when it read them all).");

static PyObject *read_common(PyObject *self, PyObject *args)
{
    PyObject *lines, *messages, *same, *loads, *decode;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!nO!O!OO", &PyList_Type, &lines, &start, &PyList_Type, &messages, &PyDict_Type,
                          &same, &loads, &decode))
        return NULL;
    PyObject *names[F_COUNT] = {NULL}, *kwargs = NULL;
    Py_ssize_t i = start < 0 ? 0 : start, n = PyList_GET_SIZE(lines);
    int failed = 0;
    for (int k = 0; k < F_COUNT && !failed; k++)
        failed = !(names[k] = PyUnicode_InternFromString(COMMON_NAMES[k]));
    failed = failed || !(kwargs = Py_BuildValue("{s:O}", "validate", Py_True));
    for (; i < n && !failed; i++) {
        PyObject *data = PyObject_CallOneArg(loads, PyList_GET_ITEM(lines, i));
        PyObject *message = data ? common_message(data, names, same, decode, kwargs) : NULL;
        Py_XDECREF(data);
        if (!message) {
            if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception))
                failed = 1; /* KeyboardInterrupt and the like go on up */
            else
                PyErr_Clear();
            break;
        }
        failed = PyList_Append(messages, message) < 0;
        Py_DECREF(message);
    }
    for (int k = 0; k < F_COUNT; k++)
        Py_XDECREF(names[k]);
    Py_XDECREF(kwargs);
    return failed ? NULL : PyLong_FromSsize_t(i);
}

/* ---------------------------------------------------------------------------------------- */
/* split_lines                                                                               */

PyDoc_STRVAR(split_lines_doc,
"split_lines(chunk, lines) -> int\n\n"
"Appends to `lines` a memoryview of each complete line of `chunk` (a memoryview, without its\n"
"newline) and returns where the unfinished rest begins.");

static PyObject *split_lines(PyObject *self, PyObject *args)
{
    PyObject *chunk, *lines;
    if (!PyArg_ParseTuple(args, "O!O!", &PyMemoryView_Type, &chunk, &PyList_Type, &lines))
        return NULL;
    Py_buffer *view = PyMemoryView_GET_BUFFER(chunk);
    if (!PyBuffer_IsContiguous(view, 'C') || view->itemsize != 1) {
        PyErr_SetString(PyExc_ValueError, "the chunk must be a contiguous view of bytes");
        return NULL;
    }
    const char *data = view->buf;
    Py_ssize_t start = 0, size = view->len;
    const char *newline;
    while (start < size && (newline = memchr(data + start, '\n', (size_t)(size - start)))) {
        Py_ssize_t end = newline - data;
        PyObject *line = PySequence_GetSlice(chunk, start, end);
        if (!line || PyList_Append(lines, line) < 0) {
            Py_XDECREF(line);
            return NULL;
        }
        Py_DECREF(line);
        start = end + 1;
    }
    return PyLong_FromSsize_t(start);
}

static PyMethodDef methods[] = {
    {"result_lines", result_lines, METH_VARARGS, result_lines_doc},
    {"read_common", read_common, METH_VARARGS, read_common_doc},
    {"split_lines", split_lines, METH_VARARGS, split_lines_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "app._ndjson",
    .m_doc = "store load's per-line loops, compiled.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__ndjson(void)
{
    return PyModuleDef_Init(&module);
}
