/*
 * Compiled hot paths of the store: encoding runs of commit log records into a segment, and
 * scanning records for dispatch. The record layout is not declared here: store/recordio.py
 * derives every offset from store/layouts.py and passes it in, and tests check these
 * functions byte for byte against the pure-Python codec.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CLMUL_CRC 1
#endif

/* The record layout, in the order store/recordio.py builds the tuple. */
typedef struct {
    Py_ssize_t total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, head_size;
    Py_ssize_t host_v4, host_v6; /* address + port */
    Py_ssize_t store_ts_size;
    Py_ssize_t reconsume, prepared, body_len, tail_size; /* offsets within the tail */
    long magic_v1, magic_v2, magic_blank;
    long born_v6_flag, store_v6_flag;
    Py_ssize_t topic_len_v1, topic_len_v2, props_len_size, blank_min;
} Layout;

/* The last layout tuple read, kept (with a reference, so its identity stays its own) because
 * every call passes the same one: record_layout() is computed once. */
static PyObject *known_layout_obj = NULL;
static Layout known_layout;

static int parse_layout(PyObject *obj, Layout *l)
{
    if (obj == known_layout_obj) {
        *l = known_layout;
        return 1;
    }
    if (!PyArg_ParseTuple(obj, "nnnnnnnnnnnnnnnnnlllllnnnn;layout tuple",
                            &l->total, &l->magic, &l->crc, &l->queue_id, &l->flag, &l->queue_offset,
                            &l->phys, &l->sys_flag, &l->born_ts, &l->head_size, &l->host_v4, &l->host_v6,
                            &l->store_ts_size, &l->reconsume, &l->prepared, &l->body_len, &l->tail_size,
                            &l->magic_v1, &l->magic_v2, &l->magic_blank, &l->born_v6_flag,
                            &l->store_v6_flag, &l->topic_len_v1, &l->topic_len_v2, &l->props_len_size,
                            &l->blank_min))
        return 0;
    Py_XSETREF(known_layout_obj, Py_NewRef(obj));
    known_layout = *l;
    return 1;
}

static inline void put_be(unsigned char *p, uint64_t v, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

static inline int64_t get_be(const unsigned char *p, int width)
{
    uint64_t v = 0;
    for (int i = 0; i < width; i++)
        v = (v << 8) | p[i];
    if (width < 8 && (v >> (8 * width - 1)) & 1)
        v |= ~(uint64_t)0 << (8 * width);
    return (int64_t)v;
}

/* ---------------------------------------------------------------------------------------- */
/* body CRC                                                                                  */

#ifdef HAVE_CLMUL_CRC
/* CRC-32 (zlib's, reflected) of `len` bytes, len a multiple of 16 and at least 64, by folding
 * with carry-less multiplication: Gopal et al., "Fast CRC Computation for Generic Polynomials
 * Using PCLMULQDQ Instruction" (Intel, 2009), with the constants it gives for this polynomial.
 * `state` and the result are the raw register: zlib's value inverted. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_fold(uint32_t state, const unsigned char *p,
                                                                   size_t len)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641); /* mu, P(x) */
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)state));
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
    p += 64;
    len -= 64;
    for (; len >= 64; p += 64, len -= 64) { /* four lanes, 64 bytes ahead at a time */
        __m128i a0 = _mm_clmulepi64_si128(a, k1k2, 0x00), b0 = _mm_clmulepi64_si128(b, k1k2, 0x00);
        __m128i c0 = _mm_clmulepi64_si128(c, k1k2, 0x00), d0 = _mm_clmulepi64_si128(d, k1k2, 0x00);
        a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k1k2, 0x11), a0),
                          _mm_loadu_si128((const __m128i *)p));
        b = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(b, k1k2, 0x11), b0),
                          _mm_loadu_si128((const __m128i *)(p + 16)));
        c = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(c, k1k2, 0x11), c0),
                          _mm_loadu_si128((const __m128i *)(p + 32)));
        d = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(d, k1k2, 0x11), d0),
                          _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    /* the four lanes into one, then the remaining 16-byte blocks */
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)), b);
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)), c);
    a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)), d);
    for (; len >= 16; p += 16, len -= 16)
        a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), _mm_clmulepi64_si128(a, k3k4, 0x00)),
                          _mm_loadu_si128((const __m128i *)p));
    /* 128 bits to 64, to 32, then Barrett reduction */
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, k3k4, 0x10));
    a = _mm_xor_si128(_mm_srli_si128(a, 4), _mm_clmulepi64_si128(_mm_and_si128(a, low32), k5, 0x00));
    __m128i t = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), poly, 0x10), low32);
    a = _mm_xor_si128(a, _mm_clmulepi64_si128(t, poly, 0x00));
    return (uint32_t)_mm_extract_epi32(a, 1);
}

static int clmul_usable = -1;
#endif

/* zlib's crc32(crc, p, len), by carry-less multiplication where the processor has it. */
static uint32_t body_crc32(uint32_t crc, const unsigned char *p, size_t len)
{
#ifdef HAVE_CLMUL_CRC
    if (clmul_usable < 0) {
        __builtin_cpu_init();
        clmul_usable = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    }
    if (clmul_usable && len >= 64) {
        size_t folded = len & ~(size_t)15;
        crc = ~crc_fold(~crc, p, folded);
        p += folded;
        len -= folded;
    }
#endif
    while (len > 0) { /* zlib takes at most UINT_MAX bytes a call */
        uInt n = len > 0x40000000 ? 0x40000000 : (uInt)len;
        crc = (uint32_t)crc32((uLong)crc, (const Bytef *)p, n);
        p += n;
        len -= n;
    }
    return crc;
}

PyDoc_STRVAR(crc32_doc,
"crc32(data, value=0) -> int\n\n"
"zlib.crc32, as the encoders compute a record's body CRC.");

static PyObject *crc32_of(PyObject *self, PyObject *args)
{
    Py_buffer data = {0};
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k", &data, &value))
        return NULL;
    uint32_t crc = body_crc32((uint32_t)value, (const unsigned char *)data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}


/* ---------------------------------------------------------------------------------------- */
/* encode_run                                                                                */

typedef struct {
    Py_ssize_t size;
    Py_buffer topic, born_addr, body, props;
    long queue_id, flag, sys_flag, born_port, reconsume, magic;
    long long born_ts, prepared;
} Item;

static void release_item(Item *it)
{
    PyBuffer_Release(&it->topic);
    PyBuffer_Release(&it->born_addr);
    PyBuffer_Release(&it->body);
    PyBuffer_Release(&it->props);
}

/* item: (size, topic, queue_id, flag, sys_flag, born_ts, born_addr, born_port, reconsume, body,
 *        props, magic[, prepared transaction offset]) */
static int parse_item(PyObject *obj, Item *it)
{
    memset(it, 0, sizeof(*it));
    if (!PyTuple_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "each item must be a tuple");
        return 0;
    }
    return PyArg_ParseTuple(obj, "ny*llLLy*lly*y*l|L;record item", &it->size, &it->topic, &it->queue_id,
                            &it->flag, &it->sys_flag, &it->born_ts, &it->born_addr, &it->born_port,
                            &it->reconsume, &it->body, &it->props, &it->magic, &it->prepared);
}

/* parse_item for the tuples the builders make (exact bytes and ints in range, no prepared
 * transaction offset), without taking buffers; 0 leaves the item to parse_item, with no
 * exception set. */
static int parse_item_fast(PyObject *obj, Item *it)
{
    if (!PyTuple_CheckExact(obj) || PyTuple_GET_SIZE(obj) != 12)
        return 0;
    static const int bytes_fields[] = {1, 6, 9, 10};
    for (int i = 0; i < 4; i++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(obj, bytes_fields[i])))
            return 0;
    long long v[12];
    static const int int_fields[] = {0, 2, 3, 4, 5, 7, 8, 11};
    for (int i = 0; i < 8; i++) {
        PyObject *x = PyTuple_GET_ITEM(obj, int_fields[i]);
        int overflow = 0;
        if (!PyLong_CheckExact(x))
            return 0;
        v[int_fields[i]] = PyLong_AsLongLongAndOverflow(x, &overflow);
        if (overflow || (int_fields[i] != 5 && (v[int_fields[i]] < LONG_MIN || v[int_fields[i]] > LONG_MAX)))
            return 0;
    }
    memset(it, 0, sizeof(*it));
    it->size = (Py_ssize_t)v[0];
    it->queue_id = (long)v[2];
    it->flag = (long)v[3];
    it->sys_flag = (long)v[4];
    it->born_ts = v[5];
    it->born_port = (long)v[7];
    it->reconsume = (long)v[8];
    it->magic = (long)v[11];
    Py_buffer *views[] = {&it->topic, &it->born_addr, &it->body, &it->props};
    for (int i = 0; i < 4; i++) { /* borrowed: the caller's list holds the tuple, the GIL is held */
        PyObject *b = PyTuple_GET_ITEM(obj, bytes_fields[i]);
        views[i]->buf = PyBytes_AS_STRING(b);
        views[i]->len = PyBytes_GET_SIZE(b);
    }
    return 1;
}

static Py_ssize_t host_size(const Layout *l, Py_ssize_t addr_len)
{
    return addr_len == 16 ? l->host_v6 : l->host_v4;
}

static Py_ssize_t item_size(const Layout *l, const Item *it, Py_ssize_t store_addr_len)
{
    Py_ssize_t topic_len_size = it->magic == l->magic_v2 ? l->topic_len_v2 : l->topic_len_v1;
    return l->head_size + host_size(l, it->born_addr.len) + l->store_ts_size + host_size(l, store_addr_len) +
           l->tail_size + it->body.len + topic_len_size + it->topic.len + l->props_len_size + it->props.len;
}

static unsigned char *write_host(unsigned char *p, const Layout *l, const Py_buffer *addr, long port)
{
    memcpy(p, addr->buf, addr->len);
    put_be(p + addr->len, (uint32_t)port, 4);
    return p + host_size(l, addr->len);
}

static void write_record(unsigned char *p, const Layout *l, const Item *it, long long queue_offset,
                         long long phys, long long store_ts, const Py_buffer *store_addr, long store_port)
{
    uint32_t crc = body_crc32(0, (const unsigned char *)it->body.buf, (size_t)it->body.len) & 0x7FFFFFFF;
    put_be(p + l->total, (uint32_t)it->size, 4);
    put_be(p + l->magic, (uint32_t)it->magic, 4);
    put_be(p + l->crc, crc, 4);
    put_be(p + l->queue_id, (uint32_t)it->queue_id, 4);
    put_be(p + l->flag, (uint32_t)it->flag, 4);
    put_be(p + l->queue_offset, (uint64_t)queue_offset, 8);
    put_be(p + l->phys, (uint64_t)phys, 8);
    put_be(p + l->sys_flag, (uint32_t)it->sys_flag, 4);
    put_be(p + l->born_ts, (uint64_t)it->born_ts, 8);
    unsigned char *q = write_host(p + l->head_size, l, &it->born_addr, it->born_port);
    put_be(q, (uint64_t)store_ts, (int)l->store_ts_size);
    q = write_host(q + l->store_ts_size, l, store_addr, store_port);
    put_be(q + l->reconsume, (uint32_t)it->reconsume, 4);
    put_be(q + l->prepared, (uint64_t)it->prepared, 8);
    put_be(q + l->body_len, (uint32_t)it->body.len, 4);
    q += l->tail_size;
    memcpy(q, it->body.buf, it->body.len);
    q += it->body.len;
    Py_ssize_t topic_len_size = it->magic == l->magic_v2 ? l->topic_len_v2 : l->topic_len_v1;
    put_be(q, (uint64_t)it->topic.len, (int)topic_len_size);
    q += topic_len_size;
    memcpy(q, it->topic.buf, it->topic.len);
    q += it->topic.len;
    put_be(q, (uint64_t)it->props.len, (int)l->props_len_size);
    q += l->props_len_size;
    memcpy(q, it->props.buf, it->props.len);
}

/* Parse item `obj` and check its declared size against its fields; on failure an exception is
 * set and nothing is held. `index` names the item in the message (-1: a single item). */
static int checked_item(PyObject *obj, const Layout *l, Py_ssize_t store_addr_len, Py_ssize_t index, Item *it)
{
    if (!parse_item_fast(obj, it) && !parse_item(obj, it))
        return 0;
    Py_ssize_t size = item_size(l, it, store_addr_len);
    if (size != it->size || (it->born_addr.len != 4 && it->born_addr.len != 16)) {
        release_item(it);
        if (index >= 0)
            PyErr_Format(PyExc_ValueError, "item %zd: declared size %zd, encoded size %zd", index, it->size, size);
        else
            PyErr_Format(PyExc_ValueError, "declared size %zd, encoded size %zd", it->size, size);
        return 0;
    }
    return 1;
}

/* Whether a record of `size` bytes at `pos` leaves room for a BLANK behind it (or fills an empty
 * segment). */
static int fits_in_segment(const Layout *l, Py_ssize_t pos, Py_ssize_t size, Py_ssize_t seg_size)
{
    return pos == 0 ? size <= seg_size : size + l->blank_min <= seg_size - pos;
}

PyDoc_STRVAR(encode_run_doc,
"encode_run(out, seg_pos, seg_size, layout, items, start, queue_offsets, phys_out, seg_base, store_ts,\n"
"           store_addr, store_port) -> (count, written)\n\n"
"Encode items[start:] into the writable buffer `out` from its start, for a segment of `seg_size`\n"
"bytes based at physical offset `seg_base` whose tail is at `seg_pos`. Stops before a record that\n"
"would not leave room for a BLANK behind it in the segment, or that does not fit in `out`.\n"
"Record i gets queue offset queue_offsets[i] (int64 buffer); its physical offset goes to\n"
"phys_out[i] (int64 buffer).");

static PyObject *encode_run(PyObject *self, PyObject *args)
{
    Py_buffer out = {0}, offsets = {0}, phys_out = {0}, store_addr = {0};
    PyObject *layout_obj, *items;
    Py_ssize_t seg_pos, seg_size, start;
    long long seg_base, store_ts;
    long store_port;
    Layout l;
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "w*nnOOny*w*LLy*l", &out, &seg_pos, &seg_size, &layout_obj, &items, &start,
                          &offsets, &phys_out, &seg_base, &store_ts, &store_addr, &store_port))
        return NULL;
    if (!parse_layout(layout_obj, &l))
        goto done;
    if (!PyList_Check(items)) {
        PyErr_SetString(PyExc_TypeError, "items must be a list");
        goto done;
    }
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (offsets.len < n * 8 || phys_out.len < n * 8 || start < 0 || start > n || seg_pos < 0 || seg_pos > seg_size) {
        PyErr_SetString(PyExc_ValueError, "queue_offsets/phys_out too short or start/seg_pos out of range");
        goto done;
    }
    if (store_addr.len != 4 && store_addr.len != 16) {
        PyErr_SetString(PyExc_ValueError, "the store address has 4 or 16 bytes");
        goto done;
    }
    const int64_t *queue_offsets = (const int64_t *)offsets.buf;
    int64_t *phys_values = (int64_t *)phys_out.buf;
    unsigned char *base = (unsigned char *)out.buf;
    Py_ssize_t written = 0;
    Py_ssize_t i = start;
    for (; i < n; i++) {
        Item it;
        if (!checked_item(PyList_GET_ITEM(items, i), &l, store_addr.len, i, &it))
            goto done;
        Py_ssize_t size = it.size;
        Py_ssize_t pos = seg_pos + written;
        if (!fits_in_segment(&l, pos, size, seg_size) || size > out.len - written) {
            release_item(&it);
            break;
        }
        long long phys = seg_base + pos;
        write_record(base + written, &l, &it, queue_offsets[i], phys, store_ts, &store_addr, store_port);
        release_item(&it);
        phys_values[i] = phys;
        written += size;
    }
    result = Py_BuildValue("nn", i - start, written);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&phys_out);
    PyBuffer_Release(&store_addr);
    return result;
}

PyDoc_STRVAR(encode_one_doc,
"encode_one(segment, seg_pos, seg_size, layout, item, queue_offset, phys, store_ts, store_addr,\n"
"           store_port) -> written\n\n"
"Encode one item at seg_pos of a segment buffer (the single-message put). Returns the bytes\n"
"written, or 0 when the record would not leave room for a BLANK behind it.");

static PyObject *encode_one(PyObject *self, PyObject *args)
{
    Py_buffer seg = {0}, store_addr = {0};
    PyObject *layout_obj, *item;
    Py_ssize_t seg_pos, seg_size;
    long long queue_offset, phys, store_ts;
    long store_port;
    Layout l;
    Item it;
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "w*nnOOLLLy*l", &seg, &seg_pos, &seg_size, &layout_obj, &item, &queue_offset,
                          &phys, &store_ts, &store_addr, &store_port))
        return NULL;
    if (!parse_layout(layout_obj, &l))
        goto done;
    if (store_addr.len != 4 && store_addr.len != 16) {
        PyErr_SetString(PyExc_ValueError, "the store address has 4 or 16 bytes");
        goto done;
    }
    if (seg_pos < 0 || seg_pos > seg_size || seg_size > seg.len) {
        PyErr_SetString(PyExc_ValueError, "seg_pos or seg_size out of range");
        goto done;
    }
    if (!checked_item(item, &l, store_addr.len, -1, &it))
        goto done;
    Py_ssize_t size = it.size;
    int fits = fits_in_segment(&l, seg_pos, size, seg_size);
    if (fits)
        write_record((unsigned char *)seg.buf + seg_pos, &l, &it, queue_offset, phys, store_ts, &store_addr,
                     store_port);
    release_item(&it);
    result = PyLong_FromSsize_t(fits ? size : 0);
done:
    PyBuffer_Release(&seg);
    PyBuffer_Release(&store_addr);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* scan_records                                                                              */

/* One scanned record; store/recordio.py declares the matching numpy dtype. */
typedef struct {
    int64_t phys;
    int64_t queue_offset;
    int64_t store_ts;
    int32_t size;
    int32_t queue_id;
    int32_t sys_flag;
    int32_t topic_id;
    int32_t tags_hash;
    int32_t delay_level;
} ScannedRecord;

typedef struct {
    int32_t record;
    int32_t hash;
} ScannedKey;

#define NO_DELAY_LEVEL INT32_MIN

enum { SCAN_END = 0, SCAN_BLANK = 1, SCAN_SLOW = 2, SCAN_FULL = 3 };

static uint32_t java_hash(uint32_t h, const unsigned char *s, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        h = 31u * h + s[i];
    return h;
}

static int32_t index_hash(uint32_t h)
{
    int32_t v = (int32_t)h;
    if (v == INT32_MIN)
        return 0;
    return v < 0 ? -v : v;
}

/* Whether s is well-formed UTF-8 as Python's strict decoder reads it (no overlong forms, no
 * encoded surrogates, nothing past U+10FFFF). */
static int valid_utf8(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t more;
        unsigned char low = 0x80, high = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            more = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0)
                low = 0xA0;
            else if (c == 0xED)
                high = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0)
                low = 0x90;
            else if (c == 0xF4)
                high = 0x8F;
        } else
            return 0;
        if (n - i <= more || s[i + 1] < low || s[i + 1] > high)
            return 0;
        for (Py_ssize_t k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += more + 1;
    }
    return 1;
}

/* String.hashCode continued over well-formed UTF-8 (valid_utf8), as Java hashes the UTF-16
 * units of the decoded text: a code point past U+FFFF counts as its two surrogates. */
static uint32_t utf8_java_hash(uint32_t h, const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        uint32_t cp;
        if (c < 0x80) {
            h = 31u * h + c;
            i++;
            continue;
        }
        if (c < 0xE0) {
            cp = ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        } else if (c < 0xF0) {
            cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
            i += 3;
        } else {
            cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                 ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
            i += 4;
        }
        if (cp < 0x10000) {
            h = 31u * h + cp;
        } else {
            cp -= 0x10000;
            h = 31u * h + (0xD800u + (cp >> 10));
            h = 31u * h + (0xDC00u + (cp & 0x3FF));
        }
    }
    return h;
}

/* Integer.parseInt of a short ASCII value; NO_DELAY_LEVEL when it is not a number. */
static int32_t parse_level(const unsigned char *s, Py_ssize_t n)
{
    int negative = 0;
    Py_ssize_t i = 0;
    if (n > 0 && (s[0] == '-' || s[0] == '+')) {
        negative = s[0] == '-';
        i = 1;
    }
    if (i == n || n - i > 9)
        return NO_DELAY_LEVEL;
    int32_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return NO_DELAY_LEVEL;
        v = v * 10 + (s[i] - '0');
    }
    return negative ? -v : v;
}

typedef struct {
    const unsigned char *tags, *keys, *uniq, *delay;
    Py_ssize_t tags_len, keys_len, uniq_len, delay_len;
} WantedProperties;

static int name_is(const unsigned char *s, Py_ssize_t n, const char *name)
{
    size_t len = strlen(name);
    return (size_t)n == len && memcmp(s, name, len) == 0;
}

/* MessageDecoder.string2messageProperties, keeping only the names dispatch needs (last wins). */
static void find_properties(const unsigned char *p, Py_ssize_t n, WantedProperties *w)
{
    memset(w, 0, sizeof(*w));
    Py_ssize_t chunk = 0;
    while (chunk <= n) {
        const unsigned char *end = memchr(p + chunk, '\x02', n - chunk);
        Py_ssize_t chunk_end = end ? end - p : n;
        Py_ssize_t len = chunk_end - chunk;
        if (len >= 3) {
            const unsigned char *sep = memchr(p + chunk, '\x01', len);
            Py_ssize_t at = sep ? sep - (p + chunk) : -1;
            if (at > 0 && at < len - 1) {
                const unsigned char *name = p + chunk, *value = p + chunk + at + 1;
                Py_ssize_t value_len = len - at - 1;
                if (name_is(name, at, "TAGS")) {
                    w->tags = value;
                    w->tags_len = value_len;
                } else if (name_is(name, at, "KEYS")) {
                    w->keys = value;
                    w->keys_len = value_len;
                } else if (name_is(name, at, "UNIQ_KEY")) {
                    w->uniq = value;
                    w->uniq_len = value_len;
                } else if (name_is(name, at, "DELAY")) {
                    w->delay = value;
                    w->delay_len = value_len;
                }
            }
        }
        chunk = chunk_end + 1;
    }
}

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Growable;

/* Append without the interpreter lock: 0 when out of memory, no exception set. Free with
 * PyMem_RawFree. */
static int grow_append_raw(Growable *g, const void *item, Py_ssize_t size)
{
    if (g->len + size > g->cap) {
        Py_ssize_t cap = g->cap ? g->cap * 2 : 4096;
        while (cap < g->len + size)
            cap *= 2;
        char *data = PyMem_RawRealloc(g->data, cap);
        if (!data)
            return 0;
        g->data = data;
        g->cap = cap;
    }
    memcpy(g->data + g->len, item, size);
    g->len += size;
    return 1;
}

static int grow_append(Growable *g, const void *item, Py_ssize_t size)
{
    if (!grow_append_raw(g, item, size)) {
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

/* The id of `topic` in the caller's topic table (dict bytes -> id, list of bytes), added if new. */
static int topic_id_of(PyObject *ids, PyObject *names, const unsigned char *topic, Py_ssize_t len)
{
    PyObject *key = PyBytes_FromStringAndSize((const char *)topic, len);
    if (!key)
        return -1;
    PyObject *found = PyDict_GetItemWithError(ids, key);
    if (found) {
        Py_DECREF(key);
        return (int)PyLong_AsLong(found);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    Py_ssize_t id = PyList_GET_SIZE(names);
    PyObject *id_obj = PyLong_FromSsize_t(id);
    int failed = !id_obj || PyDict_SetItem(ids, key, id_obj) < 0 || PyList_Append(names, key) < 0;
    Py_XDECREF(id_obj);
    Py_DECREF(key);
    return failed ? -1 : (int)id;
}

PyDoc_STRVAR(scan_records_doc,
"scan_records(buf, pos, limit, layout, max_records, topic_ids, topic_names) -> (status, pos, records, keys)\n\n"
"Scan well-formed records (topic and properties in UTF-8) from `pos` up to `limit`. `records`\n"
"packs one ScannedRecord per\n"
"record, `keys` one (record number, index hash of topic#key) per UNIQ_KEY and KEYS token.\n"
"status: 0 reached limit, 1 BLANK at pos, 2 the record at pos needs the Python decoder\n"
"(corrupt, not UTF-8 or unknown magic), 3 max_records scanned. Hashes are Java's, over the\n"
"UTF-16 units of the text.");

static PyObject *scan_records(PyObject *self, PyObject *args)
{
    Py_buffer buf = {0};
    PyObject *layout_obj, *topic_ids, *topic_names;
    Py_ssize_t pos, limit, max_records;
    Layout l;
    Growable records = {0}, keys = {0};
    PyObject *result = NULL;
    int status = SCAN_END;

    if (!PyArg_ParseTuple(args, "y*nnOnO!O!", &buf, &pos, &limit, &layout_obj, &max_records, &PyDict_Type,
                          &topic_ids, &PyList_Type, &topic_names))
        return NULL;
    if (!parse_layout(layout_obj, &l))
        goto done;
    if (limit > buf.len)
        limit = buf.len;
    const unsigned char *base = (const unsigned char *)buf.buf;
    const unsigned char *last_topic = NULL;
    Py_ssize_t last_topic_len = 0;
    int last_topic_id = -1;
    Py_ssize_t count = 0;
    Py_ssize_t min_size = l.head_size + 2 * l.host_v4 + l.store_ts_size + l.tail_size;
    int out_of_memory = 0;

    /* The scan reads the held buffer without the interpreter lock, taking it back only to look
     * up a topic id (and at the end). */
    PyThreadState *released = PyEval_SaveThread();
    while (pos + 8 <= limit) {
        if (count >= max_records) {
            status = SCAN_FULL;
            break;
        }
        const unsigned char *r = base + pos;
        int64_t total = get_be(r + l.total, 4);
        int64_t magic = get_be(r + l.magic, 4);
        if (magic == l.magic_blank) {
            status = SCAN_BLANK;
            break;
        }
        if ((magic != l.magic_v1 && magic != l.magic_v2) || total < min_size || total > limit - pos) {
            status = SCAN_SLOW;
            break;
        }
        int64_t sys_flag = get_be(r + l.sys_flag, 4);
        Py_ssize_t cursor = l.head_size + ((sys_flag & l.born_v6_flag) ? l.host_v6 : l.host_v4);
        int64_t store_ts = get_be(r + cursor, (int)l.store_ts_size);
        cursor += l.store_ts_size + ((sys_flag & l.store_v6_flag) ? l.host_v6 : l.host_v4);
        if (cursor + l.tail_size > total) {
            status = SCAN_SLOW;
            break;
        }
        int64_t body_len = get_be(r + cursor + l.body_len, 4);
        cursor += l.tail_size;
        if (body_len < 0 || body_len > total - cursor) {
            status = SCAN_SLOW;
            break;
        }
        cursor += body_len;
        Py_ssize_t topic_len_size = magic == l.magic_v2 ? l.topic_len_v2 : l.topic_len_v1;
        if (cursor + topic_len_size > total) {
            status = SCAN_SLOW;
            break;
        }
        int64_t topic_len = get_be(r + cursor, (int)topic_len_size);
        cursor += topic_len_size;
        if (topic_len <= 0 || topic_len > total - cursor - l.props_len_size) {
            status = SCAN_SLOW;
            break;
        }
        const unsigned char *topic = r + cursor;
        cursor += topic_len;
        int64_t props_len = get_be(r + cursor, (int)l.props_len_size);
        cursor += l.props_len_size;
        if (props_len < 0 || cursor + props_len != total) {
            status = SCAN_SLOW;
            break;
        }
        const unsigned char *props = r + cursor;
        if (!valid_utf8(topic, topic_len) || !valid_utf8(props, props_len)) {
            status = SCAN_SLOW;
            break;
        }

        if (!last_topic || last_topic_len != topic_len || memcmp(last_topic, topic, topic_len) != 0) {
            PyEval_RestoreThread(released);
            last_topic_id = topic_id_of(topic_ids, topic_names, topic, topic_len);
            released = PyEval_SaveThread();
            if (last_topic_id < 0)
                break;
            last_topic = topic;
            last_topic_len = topic_len;
        }
        WantedProperties w;
        find_properties(props, props_len, &w);
        ScannedRecord rec = {
            .phys = get_be(r + l.phys, 8),
            .queue_offset = get_be(r + l.queue_offset, 8),
            .store_ts = store_ts,
            .size = (int32_t)total,
            .queue_id = (int32_t)get_be(r + l.queue_id, 4),
            .sys_flag = (int32_t)sys_flag,
            .topic_id = last_topic_id,
            .tags_hash = w.tags ? (int32_t)utf8_java_hash(0, w.tags, w.tags_len) : 0,
            .delay_level = w.delay ? parse_level(w.delay, w.delay_len) : NO_DELAY_LEVEL,
        };
        if (!grow_append_raw(&records, &rec, sizeof(rec))) {
            out_of_memory = 1;
            break;
        }
        uint32_t prefix = java_hash(utf8_java_hash(0, topic, topic_len), (const unsigned char *)"#", 1);
        if (w.uniq) {
            ScannedKey k = {(int32_t)count, index_hash(utf8_java_hash(prefix, w.uniq, w.uniq_len))};
            if (!grow_append_raw(&keys, &k, sizeof(k))) {
                out_of_memory = 1;
                break;
            }
        }
        Py_ssize_t i = 0;
        while (i < w.keys_len) {
            while (i < w.keys_len && w.keys[i] == ' ')
                i++;
            Py_ssize_t token = i;
            while (i < w.keys_len && w.keys[i] != ' ')
                i++;
            if (i > token) {
                ScannedKey k = {(int32_t)count, index_hash(utf8_java_hash(prefix, w.keys + token, i - token))};
                if (!grow_append_raw(&keys, &k, sizeof(k))) {
                    out_of_memory = 1;
                    break;
                }
            }
        }
        if (out_of_memory)
            break;
        count++;
        pos += total;
    }
    PyEval_RestoreThread(released);
    if (out_of_memory)
        PyErr_NoMemory();
    if (PyErr_Occurred())
        goto done;
    result = Py_BuildValue("iny#y#", status, pos, records.data ? records.data : "", records.len,
                           keys.data ? keys.data : "", keys.len);
done:
    PyMem_RawFree(records.data);
    PyMem_RawFree(keys.data);
    PyBuffer_Release(&buf);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* build_items                                                                               */

enum { PROP_KEYS, PROP_UNIQ_KEY, PROP_TAGS, PROP_CLUSTER, PROP_COUNT };
static const char *const PROPERTY_NAMES[PROP_COUNT] = {"KEYS", "UNIQ_KEY", "TAGS", "CLUSTER"};
static const char *const MESSAGE_FIELDS[] = {"topic", "body", "tags", "keys", "properties", "queue_id",
                                             "born_timestamp", "born_host", "flag", "delay_level",
                                             "unique_key", "reconsume_times", "compress"};
enum { F_TOPIC, F_BODY, F_TAGS, F_KEYS, F_PROPERTIES, F_QUEUE_ID, F_BORN_TS, F_BORN_HOST, F_FLAG, F_DELAY,
       F_UNIQUE_KEY, F_RECONSUME, F_COMPRESS, F_COUNT };

typedef struct {
    PyObject *topic_forms, *orders, *cluster, *store_addr, *create_unique_key, *next_queue_id;
    long store_port, sys_flag;
    Py_ssize_t fixed_size, max_body, max_record, max_props;
} BuildPlan;

static int has_separator(const char *s, Py_ssize_t n)
{
    return memchr(s, '\x01', n) != NULL || memchr(s, '\x02', n) != NULL;
}

/* A 32-bit int the record can hold, or -1 with *ok = 0. */
static long small_int(PyObject *obj, int *ok)
{
    if (!PyLong_CheckExact(obj)) {
        *ok = 0;
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || v < INT32_MIN || v > INT32_MAX) {
        *ok = 0;
        return -1;
    }
    return (long)v;
}

typedef struct {
    const char *text;
    Py_ssize_t len;
} Text;

/* The item for one message, or Py_None when it takes the Python builder (anything beyond the
 * common shape, including everything invalid, which the Python builder then reports). */
static PyObject *build_one(PyObject *msg, long long now, const BuildPlan *plan, PyObject *const *names,
                           Growable *props, Growable *keys)
{
    PyObject *f[F_COUNT] = {0};
    PyObject *unique_key = NULL, *result = NULL;
    for (int i = 0; i < F_COUNT; i++) {
        f[i] = PyObject_GetAttr(msg, names[i]);
        if (!f[i]) {
            PyErr_Clear();
            goto fallback;
        }
    }
    int ok = 1;
    if (f[F_BORN_HOST] != Py_None || f[F_COMPRESS] != Py_False || small_int(f[F_DELAY], &ok) != 0 || !ok)
        goto fallback;
    if (f[F_PROPERTIES] != Py_None && !(PyDict_CheckExact(f[F_PROPERTIES]) && PyDict_GET_SIZE(f[F_PROPERTIES]) == 0))
        goto fallback;
    if (!PyUnicode_CheckExact(f[F_TOPIC]))
        goto fallback;
    PyObject *form = PyDict_GetItemWithError(plan->topic_forms, f[F_TOPIC]);
    if (!form || !PyTuple_Check(form) || PyTuple_GET_SIZE(form) < 4) {
        PyErr_Clear();
        goto fallback;
    }
    if (!PyBytes_CheckExact(f[F_BODY]) || PyBytes_GET_SIZE(f[F_BODY]) > plan->max_body)
        goto fallback;
    int round_robin = f[F_QUEUE_ID] == Py_None;
    long queues = PyLong_AsLong(PyTuple_GET_ITEM(form, 3));
    long queue_id = round_robin ? 0 : small_int(f[F_QUEUE_ID], &ok);
    long flag = small_int(f[F_FLAG], &ok);
    long reconsume = small_int(f[F_RECONSUME], &ok);
    if (!ok || queue_id < 0 || queue_id >= queues)
        goto fallback;
    long long born_ts = now;
    if (f[F_BORN_TS] != Py_None) {
        int overflow = 0;
        if (!PyLong_CheckExact(f[F_BORN_TS]))
            goto fallback;
        born_ts = PyLong_AsLongLongAndOverflow(f[F_BORN_TS], &overflow);
        if (overflow)
            goto fallback;
    }

    Text values[PROP_COUNT] = {{0}};
    keys->len = 0;
    PyObject *key_list = f[F_KEYS];
    if (key_list != Py_None) {
        if (!PyList_CheckExact(key_list))
            goto fallback;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(key_list); i++) {
            PyObject *key = PyList_GET_ITEM(key_list, i);
            Py_ssize_t len;
            const char *text = PyUnicode_CheckExact(key) ? PyUnicode_AsUTF8AndSize(key, &len) : NULL;
            if (!text) {
                PyErr_Clear();
                goto fallback;
            }
            if (len == 0 || memchr(text, ' ', len) || has_separator(text, len))
                goto fallback;
            if ((i > 0 && !grow_append(keys, " ", 1)) || !grow_append(keys, text, len))
                goto done;
        }
        if (keys->len) {
            values[PROP_KEYS].text = keys->data;
            values[PROP_KEYS].len = keys->len;
        }
    }
    if (f[F_UNIQUE_KEY] != Py_None && !PyUnicode_CheckExact(f[F_UNIQUE_KEY]))
        goto fallback;
    if (f[F_UNIQUE_KEY] != Py_None && PyUnicode_GET_LENGTH(f[F_UNIQUE_KEY]) > 0) {
        unique_key = Py_NewRef(f[F_UNIQUE_KEY]);
    } else {
        unique_key = PyObject_CallNoArgs(plan->create_unique_key);
        if (!unique_key)
            goto done;
        if (!PyUnicode_CheckExact(unique_key))
            goto fallback;
    }
    values[PROP_UNIQ_KEY].text = PyUnicode_AsUTF8AndSize(unique_key, &values[PROP_UNIQ_KEY].len);
    if (!values[PROP_UNIQ_KEY].text) {
        PyErr_Clear();
        goto fallback;
    }
    if (has_separator(values[PROP_UNIQ_KEY].text, values[PROP_UNIQ_KEY].len))
        goto fallback;
    if (f[F_TAGS] != Py_None) {
        if (!PyUnicode_CheckExact(f[F_TAGS]))
            goto fallback;
        if (PyUnicode_GET_LENGTH(f[F_TAGS]) > 0) {
            values[PROP_TAGS].text = PyUnicode_AsUTF8AndSize(f[F_TAGS], &values[PROP_TAGS].len);
            if (!values[PROP_TAGS].text) {
                PyErr_Clear();
                goto fallback;
            }
            if (has_separator(values[PROP_TAGS].text, values[PROP_TAGS].len))
                goto fallback;
        }
    }
    values[PROP_CLUSTER].text = PyBytes_AS_STRING(plan->cluster);
    values[PROP_CLUSTER].len = PyBytes_GET_SIZE(plan->cluster);

    PyObject *order = PyTuple_GET_ITEM(plan->orders, (values[PROP_KEYS].text ? 2 : 0) + (values[PROP_TAGS].text ? 1 : 0));
    props->len = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(order); i++) {
        long which = PyLong_AsLong(PyTuple_GET_ITEM(order, i));
        const char *name = PROPERTY_NAMES[which];
        if ((i > 0 && !grow_append(props, "\x02", 1)) || !grow_append(props, name, (Py_ssize_t)strlen(name)) ||
            !grow_append(props, "\x01", 1) || !grow_append(props, values[which].text, values[which].len))
            goto done;
    }
    if (props->len > plan->max_props)
        goto fallback;
    Py_ssize_t size = plan->fixed_size + PyBytes_GET_SIZE(f[F_BODY]) +
                      PyLong_AsSsize_t(PyTuple_GET_ITEM(form, 2)) + props->len;
    if (size > plan->max_record)
        goto fallback;
    if (round_robin) { /* chosen last: a message that falls back takes its turn in Python */
        PyObject *chosen = PyObject_CallFunction(plan->next_queue_id, "Ol", f[F_TOPIC], queues);
        if (!chosen)
            goto done;
        queue_id = small_int(chosen, &ok);
        Py_DECREF(chosen);
        if (!ok || queue_id < 0 || queue_id >= queues) {
            PyErr_SetString(PyExc_ValueError, "the round robin chose a queue the topic does not have");
            goto done;
        }
    }
    PyObject *props_bytes = PyBytes_FromStringAndSize(props->data, props->len);
    if (!props_bytes)
        goto done;
    PyObject *item = Py_BuildValue("(nOlllLOllONO)", size, PyTuple_GET_ITEM(form, 0), queue_id, flag,
                                   plan->sys_flag, born_ts, plan->store_addr, plan->store_port, reconsume,
                                   f[F_BODY], props_bytes, PyTuple_GET_ITEM(form, 1));
    /* Py_BuildValue's N took props_bytes, also on failure */
    if (!item)
        goto done;
    result = PyTuple_Pack(3, item, f[F_TOPIC], unique_key);
    Py_DECREF(item);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(unique_key);
    for (int i = 0; i < F_COUNT; i++)
        Py_XDECREF(f[i]);
    return result;
}

PyDoc_STRVAR(build_items_doc,
"build_items(messages, now, plan) -> (built, fallbacks)\n\n"
"For each NewMessage of the common shape (no client properties, delay, compression or born host)\n"
"its (record item, topic, unique key), as RecordBuilder.build makes them; None for any other,\n"
"which the caller builds in Python: `fallbacks` lists their indices. plan: (topic forms {topic: (bytes, magic, overhead, queues)},\n"
"HashMap orders of (CLUSTER, UNIQ_KEY [, TAGS] [, KEYS]) by 2*has_keys + has_tags as tuples of\n"
"0 KEYS 1 UNIQ_KEY 2 TAGS 3 CLUSTER, cluster bytes, store address, store port, sys flag, fixed\n"
"record size, max body, max record size, max properties bytes, unique key factory, round robin\n"
"next_queue_id(topic, queues) for a message without a queue id).");

/* NewMessage's field names, interned once. */
static PyObject *message_field_names[F_COUNT];

static int message_fields_known(void)
{
    for (int i = 0; i < F_COUNT; i++)
        if (!message_field_names[i] && !(message_field_names[i] = PyUnicode_InternFromString(MESSAGE_FIELDS[i])))
            return 0;
    return 1;
}

/* The last plan read, kept (with a reference) because a store passes the same tuple to every call. */
static PyObject *known_plan_obj = NULL;
static BuildPlan known_plan;

static int parse_plan(PyObject *plan_obj, BuildPlan *plan)
{
    if (plan_obj == known_plan_obj) {
        *plan = known_plan;
        return 1;
    }
    if (!PyArg_ParseTuple(plan_obj, "O!O!SSllnnnnOO;build plan", &PyDict_Type, &plan->topic_forms, &PyTuple_Type,
                          &plan->orders, &plan->cluster, &plan->store_addr, &plan->store_port, &plan->sys_flag,
                          &plan->fixed_size, &plan->max_body, &plan->max_record, &plan->max_props,
                          &plan->create_unique_key, &plan->next_queue_id))
        return 0;
    if (PyTuple_GET_SIZE(plan->orders) != 4) {
        PyErr_SetString(PyExc_ValueError, "the plan needs four property orders");
        return 0;
    }
    for (int i = 0; i < 4; i++) {
        PyObject *order = PyTuple_GET_ITEM(plan->orders, i);
        if (!PyTuple_Check(order)) {
            PyErr_SetString(PyExc_TypeError, "property orders are tuples");
            return 0;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(order); j++) {
            long which = PyLong_AsLong(PyTuple_GET_ITEM(order, j));
            if (which < 0 || which >= PROP_COUNT) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "property order entries are 0..3");
                return 0;
            }
        }
    }
    Py_XSETREF(known_plan_obj, Py_NewRef(plan_obj));
    known_plan = *plan;
    return 1;
}

static PyObject *build_items(PyObject *self, PyObject *args)
{
    PyObject *messages, *plan_obj;
    long long now;
    BuildPlan plan;
    PyObject *const *names = message_field_names;
    Growable props = {0}, keys = {0};
    PyObject *result = NULL, *items = NULL, *fallbacks = NULL;

    if (!PyArg_ParseTuple(args, "O!LO!", &PyList_Type, &messages, &now, &PyTuple_Type, &plan_obj))
        return NULL;
    if (!parse_plan(plan_obj, &plan) || !message_fields_known())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(messages);
    items = PyList_New(n);
    fallbacks = PyList_New(0);
    if (!items || !fallbacks)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *built = build_one(PyList_GET_ITEM(messages, i), now, &plan, names, &props, &keys);
        if (!built)
            goto done;
        PyList_SET_ITEM(items, i, built);
        if (built == Py_None) {
            PyObject *index = PyLong_FromSsize_t(i);
            int failed = !index || PyList_Append(fallbacks, index) < 0;
            Py_XDECREF(index);
            if (failed)
                goto done;
        }
    }
    result = PyTuple_Pack(2, items, fallbacks);
done:
    Py_XDECREF(items);
    Py_XDECREF(fallbacks);
    PyMem_RawFree(props.data);
    PyMem_RawFree(keys.data);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* populate                                                                                  */

#include <sys/mman.h>
#include <errno.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

PyDoc_STRVAR(populate_doc,
"populate(buf, start, length)\n\n"
"Fault in the pages of a writable shared mapping without changing their contents\n"
"(madvise MADV_POPULATE_WRITE), letting other threads run meanwhile. `start` must be a multiple\n"
"of the page size. Raises OSError where the kernel does not support it.");

static PyObject *populate(PyObject *self, PyObject *args)
{
    Py_buffer buf = {0};
    Py_ssize_t start, length;
    if (!PyArg_ParseTuple(args, "w*nn", &buf, &start, &length))
        return NULL;
    if (start < 0 || length < 0 || start > buf.len || length > buf.len - start) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "range outside the buffer");
        return NULL;
    }
    int rc = 0, err = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = madvise((char *)buf.buf + start, (size_t)length, MADV_POPULATE_WRITE);
    err = errno;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (rc != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------- */
/* assign_queue_offsets                                                                      */

PyDoc_STRVAR(assign_queue_offsets_doc,
"assign_queue_offsets(planned, table, initial, offsets_out) -> advanced\n\n"
"The queue offset of each planned (item, topic, unique key), from RocketMQ's topic-queue table\n"
"`table` {(topic bytes, queue id): next offset}, or `initial(topic bytes, queue id)` for a queue\n"
"not in it. Offsets go to offsets_out (int64 buffer); the returned dict holds the table's new\n"
"entries, for the caller to keep once the records are written.");

static PyObject *assign_queue_offsets(PyObject *self, PyObject *args)
{
    PyObject *planned, *table, *initial;
    Py_buffer out = {0};
    if (!PyArg_ParseTuple(args, "O!O!Ow*", &PyList_Type, &planned, &PyDict_Type, &table, &initial, &out))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(planned);
    PyObject *advanced = NULL;
    if (out.len < n * 8) {
        PyErr_SetString(PyExc_ValueError, "offsets_out is too short");
        goto done;
    }
    advanced = PyDict_New();
    if (!advanced)
        goto done;
    int64_t *offsets = (int64_t *)out.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyList_GET_ITEM(planned, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 1 || !PyTuple_Check(PyTuple_GET_ITEM(entry, 0)) ||
            PyTuple_GET_SIZE(PyTuple_GET_ITEM(entry, 0)) < 3) {
            PyErr_SetString(PyExc_TypeError, "planned entries are (item, topic, unique key)");
            goto fail;
        }
        PyObject *item = PyTuple_GET_ITEM(entry, 0);
        PyObject *key = PyTuple_Pack(2, PyTuple_GET_ITEM(item, 1), PyTuple_GET_ITEM(item, 2));
        if (!key)
            goto fail;
        PyObject *found = PyDict_GetItemWithError(advanced, key);
        if (!found && !PyErr_Occurred())
            found = PyDict_GetItemWithError(table, key);
        PyObject *start = NULL;
        if (!found && !PyErr_Occurred())
            found = start = PyObject_CallObject(initial, key);
        long long offset = found ? PyLong_AsLongLong(found) : -1;
        Py_XDECREF(start);
        if (offset == -1 && PyErr_Occurred()) {
            Py_DECREF(key);
            goto fail;
        }
        offsets[i] = offset;
        PyObject *next = PyLong_FromLongLong(offset + 1);
        int failed = !next || PyDict_SetItem(advanced, key, next) < 0;
        Py_XDECREF(next);
        Py_DECREF(key);
        if (failed)
            goto fail;
    }
    goto done;
fail:
    Py_CLEAR(advanced);
done:
    PyBuffer_Release(&out);
    return advanced;
}

/* ---------------------------------------------------------------------------------------- */
/* put_results                                                                               */

PyDoc_STRVAR(put_results_doc,
"put_results(result_type, planned, queue_offsets, phys, store_ts, store_host) -> list\n\n"
"One result_type (a tuple subclass of (topic, queue id, queue offset, phys offset, size,\n"
"unique key, store time, store host)) per planned (item, topic, unique key); queue_offsets and\n"
"phys are int64 buffers.");

static PyObject *put_results(PyObject *self, PyObject *args)
{
    PyTypeObject *type;
    PyObject *planned, *store_ts, *host;
    Py_buffer offsets = {0}, phys = {0};
    if (!PyArg_ParseTuple(args, "O!O!y*y*OO", &PyType_Type, &type, &PyList_Type, &planned, &offsets, &phys,
                          &store_ts, &host))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(planned);
    if (!PyType_IsSubtype(type, &PyTuple_Type) || offsets.len < n * 8 || phys.len < n * 8) {
        PyErr_SetString(PyExc_ValueError, "a tuple type and int64 buffers as long as planned are needed");
        goto done;
    }
    result = PyList_New(n);
    if (!result)
        goto done;
    const int64_t *queue_offsets = (const int64_t *)offsets.buf, *phys_offsets = (const int64_t *)phys.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyList_GET_ITEM(planned, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3 || !PyTuple_Check(PyTuple_GET_ITEM(entry, 0)) ||
            PyTuple_GET_SIZE(PyTuple_GET_ITEM(entry, 0)) < 3) {
            PyErr_SetString(PyExc_TypeError, "planned entries are (item, topic, unique key)");
            Py_CLEAR(result);
            goto done;
        }
        PyObject *item = PyTuple_GET_ITEM(entry, 0);
        PyObject *r = type->tp_alloc(type, 8);
        if (!r) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(r, 0, Py_NewRef(PyTuple_GET_ITEM(entry, 1)));
        PyTuple_SET_ITEM(r, 1, Py_NewRef(PyTuple_GET_ITEM(item, 2)));
        PyTuple_SET_ITEM(r, 2, PyLong_FromLongLong(queue_offsets[i]));
        PyTuple_SET_ITEM(r, 3, PyLong_FromLongLong(phys_offsets[i]));
        PyTuple_SET_ITEM(r, 4, Py_NewRef(PyTuple_GET_ITEM(item, 0)));
        PyTuple_SET_ITEM(r, 5, Py_NewRef(PyTuple_GET_ITEM(entry, 2)));
        PyTuple_SET_ITEM(r, 6, Py_NewRef(store_ts));
        PyTuple_SET_ITEM(r, 7, Py_NewRef(host));
        PyList_SET_ITEM(result, i, r);
        if (!PyTuple_GET_ITEM(r, 2) || !PyTuple_GET_ITEM(r, 3)) {
            Py_CLEAR(result);
            goto done;
        }
    }
done:
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&phys);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* index_put                                                                                 */

PyDoc_STRVAR(index_put_doc,
"index_put(buf, layout, slots, entries, index_count, begin_ts, begin_phys, hashes, phys, times)\n"
"    -> (count, index_count, new_slots, begin_ts, begin_phys)\n\n"
"IndexFile.putKey for keys in order (int64 buffers of index hashes, physical offsets and store\n"
"times) until the file is full. layout: (slot table offset, slot size, entries offset, entry\n"
"size, and the offsets in an entry of hash, phys, time diff and previous entry). Entry 1 of a\n"
"file sets its begin time and offset. Returns how many keys went in, the next entry number,\n"
"how many slots were empty before, and the (possibly new) begin time and offset.");

static PyObject *index_put(PyObject *self, PyObject *args)
{
    Py_buffer buf = {0}, hashes = {0}, phys = {0}, times = {0};
    Py_ssize_t slot_table, slot_size, entries_at, entry_size, e_hash, e_phys, e_diff, e_prev;
    long long slots, entries, index_count, begin_ts, begin_phys;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "w*(nnnnnnnn)LLLLLy*y*y*", &buf, &slot_table, &slot_size, &entries_at, &entry_size,
                          &e_hash, &e_phys, &e_diff, &e_prev, &slots, &entries, &index_count, &begin_ts,
                          &begin_phys, &hashes, &phys, &times))
        return NULL;
    Py_ssize_t n = hashes.len / 8;
    if (phys.len / 8 < n || times.len / 8 < n || slots <= 0 || entries_at + entries * entry_size > buf.len ||
        slot_table + slots * slot_size > entries_at || index_count < 1) {
        PyErr_SetString(PyExc_ValueError, "index geometry or key arrays do not match");
        goto done;
    }
    unsigned char *base = (unsigned char *)buf.buf;
    const int64_t *h = (const int64_t *)hashes.buf, *p = (const int64_t *)phys.buf, *t = (const int64_t *)times.buf;
    Py_ssize_t i = 0;
    long long new_slots = 0;
    /* Plain stores into held buffers (often first touches of the file's pages): other threads
     * run meanwhile. The caller serializes writers of one index file. */
    Py_BEGIN_ALLOW_THREADS
    for (; i < n && index_count < entries; i++) {
        unsigned char *slot = base + slot_table + (((h[i] % slots) + slots) % slots) * slot_size;
        int64_t prev = get_be(slot, (int)slot_size);
        if (prev <= 0 || prev > index_count)
            prev = 0;
        int64_t diff = 0;
        if (index_count == 1) {
            if (begin_ts > 0)
                diff = (t[i] - begin_ts) / 1000;
            begin_ts = t[i];
            begin_phys = p[i];
        } else if (begin_ts > 0) {
            diff = (t[i] - begin_ts) / 1000;
        }
        if (diff < 0)
            diff = 0;
        if (diff > INT32_MAX)
            diff = INT32_MAX;
        unsigned char *entry = base + entries_at + index_count * entry_size;
        put_be(entry + e_hash, (uint32_t)h[i], 4);
        put_be(entry + e_phys, (uint64_t)p[i], 8);
        put_be(entry + e_diff, (uint32_t)diff, 4);
        put_be(entry + e_prev, (uint32_t)prev, 4);
        put_be(slot, (uint32_t)index_count, (int)slot_size);
        if (prev == 0)
            new_slots++;
        index_count++;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nLLLL", i, index_count, new_slots, begin_ts, begin_phys);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&hashes);
    PyBuffer_Release(&phys);
    PyBuffer_Release(&times);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* index_key_hash and the key filter                                                         */

/* String.hashCode continued over a str's UTF-16 code units. */
static int str_java_hash(PyObject *text, uint32_t *h)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "expected str");
        return 0;
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    uint32_t v = *h;
    if (kind == PyUnicode_1BYTE_KIND) {
        v = java_hash(v, (const unsigned char *)data, n);
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (c > 0xFFFF) {
                c -= 0x10000;
                v = 31u * v + (0xD800 + (c >> 10));
                v = 31u * v + (0xDC00 + (c & 0x3FF));
            } else {
                v = 31u * v + c;
            }
        }
    }
    *h = v;
    return 1;
}

PyDoc_STRVAR(index_key_hash_doc,
"index_key_hash(topic, key) -> int\n\n"
"The index hash of topic#key: abs(String.hashCode), Integer.MIN_VALUE giving 0.");

static PyObject *index_key_hash(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "index_key_hash takes a topic and a key");
        return NULL;
    }
    uint32_t h = 0;
    const unsigned char sep = '#';
    if (!str_java_hash(args[0], &h))
        return NULL;
    h = java_hash(h, &sep, 1);
    if (!str_java_hash(args[1], &h))
        return NULL;
    return PyLong_FromLong(index_hash(h));
}

/* Three bit positions of a key hash in a filter of 2^k bits, from a 64-bit mix of the hash: all
 * in one 512-bit block (a cache line), so that a check costs one miss rather than three. */
static void filter_bits(uint64_t hash, uint64_t mask, uint64_t bits[3])
{
    uint64_t z = hash + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    uint64_t block = mask > 511 ? (z >> 27) & mask & ~(uint64_t)511 : 0;
    for (int i = 0; i < 3; i++)
        bits[i] = block | ((z >> (9 * i)) & 511 & mask);
}

static int filter_mask(const Py_buffer *buf, uint64_t *mask)
{
    uint64_t nbits = (uint64_t)buf->len * 8;
    if (nbits < 8 || (nbits & (nbits - 1))) {
        PyErr_SetString(PyExc_ValueError, "a key filter's size must be a power of two bytes");
        return 0;
    }
    *mask = nbits - 1;
    return 1;
}

PyDoc_STRVAR(filter_add_doc,
"filter_add(bitmap, hashes) -> None\n\n"
"Set the bits of every key hash (an int64 buffer, or one int) in a filter bitmap (a writable buffer of a\n"
"power-of-two size). A long run goes without the interpreter lock.");

static PyObject *filter_add(PyObject *self, PyObject *args)
{
    Py_buffer map = {0}, hashes = {0};
    uint64_t mask;
    PyObject *map_obj, *hashes_obj;
    int64_t one;
    if (!PyArg_ParseTuple(args, "OO", &map_obj, &hashes_obj))
        return NULL;
    if (PyObject_GetBuffer(map_obj, &map, PyBUF_WRITABLE) < 0)
        return NULL;
    if (PyLong_Check(hashes_obj)) {
        one = PyLong_AsLongLong(hashes_obj);
        if (one == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&map);
            return NULL;
        }
    } else if (PyObject_GetBuffer(hashes_obj, &hashes, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&map);
        return NULL;
    }
    if (!filter_mask(&map, &mask)) {
        PyBuffer_Release(&map);
        PyBuffer_Release(&hashes);
        return NULL;
    }
    unsigned char *bitmap = (unsigned char *)map.buf;
    const int64_t *h = hashes.buf ? (const int64_t *)hashes.buf : &one;
    Py_ssize_t n = hashes.buf ? hashes.len / 8 : 1;
    PyThreadState *released = n >= 4096 ? PyEval_SaveThread() : NULL; /* a few keys: not worth a switch */
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t bits[3];
        filter_bits((uint64_t)h[i], mask, bits);
        for (int b = 0; b < 3; b++)
            bitmap[bits[b] >> 3] |= (unsigned char)(1u << (bits[b] & 7));
    }
    if (released)
        PyEval_RestoreThread(released);
    PyBuffer_Release(&map);
    PyBuffer_Release(&hashes);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(filter_has_doc,
"filter_has(bitmaps, hash) -> bool\n\n"
"False when the key hash is certainly in none of the filter bitmaps (a list of buffers).");

static PyObject *filter_has(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "filter_has takes a list of bitmaps and a hash");
        return NULL;
    }
    long long hash = PyLong_AsLongLong(args[1]);
    if (hash == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(args[0]);
    for (Py_ssize_t g = 0; g < count; g++) {
        Py_buffer map;
        uint64_t mask, bits[3];
        if (PyObject_GetBuffer(PyList_GET_ITEM(args[0], g), &map, PyBUF_SIMPLE) < 0)
            return NULL;
        if (!filter_mask(&map, &mask)) {
            PyBuffer_Release(&map);
            return NULL;
        }
        filter_bits((uint64_t)hash, mask, bits);
        const unsigned char *bitmap = (const unsigned char *)map.buf;
        int all = 1;
        for (int b = 0; b < 3 && all; b++)
            all = (bitmap[bits[b] >> 3] >> (bits[b] & 7)) & 1;
        PyBuffer_Release(&map);
        if (all)
            Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

PyDoc_STRVAR(dedupe_screen_doc,
"dedupe_screen(messages, bitmaps) -> (new_hashes, attention)\n\n"
"Sort a batch of NewMessages for duplicate suppression. A message's dedupe key is its unique_key\n"
"(a non-empty str) or else the UNIQ_KEY of its properties. A message needs no further check when\n"
"it has no dedupe key, or when it has the common shape (a str topic, delay level 0, no\n"
"properties), its key is in no other message of the batch and the key filter (bitmaps, as\n"
"filter_has) certainly has not seen the index hash of topic#key. `new_hashes` packs those index\n"
"hashes (int64), `attention` lists the indices of every other message, in order; every index\n"
"when some message is beyond what this screen reads (then `new_hashes` is empty).");

enum { SCREEN_NO_KEY = 0, SCREEN_NEW = 1, SCREEN_CHECK = 2 };

/* The dedupe key of a message (borrowed from uk or props) or NULL for none; -1 when the
 * message is beyond the screen, with or without an exception set. */
static int screen_key(PyObject *uk, PyObject *props, PyObject *uniq_name, PyObject **key, int *regular)
{
    *key = NULL;
    *regular = PyDict_CheckExact(props) && PyDict_GET_SIZE(props) == 0;
    if (uk == Py_None || (PyUnicode_CheckExact(uk) && PyUnicode_GET_LENGTH(uk) == 0)) {
        if (*regular || props == Py_None)
            return 0;
        if (!PyDict_CheckExact(props))
            return -1;
        PyObject *value = PyDict_GetItemWithError(props, uniq_name);
        if (!value)
            return PyErr_Occurred() ? -1 : 0;
        if (PyUnicode_CheckExact(value) && PyUnicode_GET_LENGTH(value) > 0)
            *key = value;
        return 0;
    }
    if (!PyUnicode_CheckExact(uk))
        return -1;
    *key = uk;
    return 0;
}

static int is_zero(PyObject *obj)
{
    int overflow = 0;
    return PyLong_CheckExact(obj) && PyLong_AsLongAndOverflow(obj, &overflow) == 0 && !overflow;
}

static PyObject *dedupe_screen(PyObject *self, PyObject *args)
{
    PyObject *messages, *bitmaps;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &messages, &PyList_Type, &bitmaps))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(messages), gens = PyList_GET_SIZE(bitmaps);
    Py_buffer *maps = PyMem_Calloc(gens ? gens : 1, sizeof(Py_buffer));
    uint64_t *masks = PyMem_Calloc(gens ? gens : 1, sizeof(uint64_t));
    unsigned char *status = PyMem_Calloc(n ? n : 1, 1);
    int64_t *hashes = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
    PyObject *names[4] = {0}, *uniq_name = NULL, *seen = NULL, *result = NULL, *attention = NULL;
    Py_ssize_t acquired = 0;
    if (!maps || !masks || !status || !hashes) {
        PyErr_NoMemory();
        goto done;
    }
    for (; acquired < gens; acquired++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(bitmaps, acquired), &maps[acquired], PyBUF_SIMPLE) < 0)
            goto done;
        if (!filter_mask(&maps[acquired], &masks[acquired])) {
            acquired++;
            goto done;
        }
    }
    static const char *const attrs[4] = {"unique_key", "properties", "topic", "delay_level"};
    for (int a = 0; a < 4; a++)
        if (!(names[a] = PyUnicode_InternFromString(attrs[a])))
            goto done;
    if (!(uniq_name = PyUnicode_FromString("UNIQ_KEY")) || !(seen = PyDict_New()))
        goto done;
    int beyond = 0;
    for (Py_ssize_t i = 0; i < n && !beyond; i++) {
        PyObject *m = PyList_GET_ITEM(messages, i);
        PyObject *uk = PyObject_GetAttr(m, names[0]);
        PyObject *props = uk ? PyObject_GetAttr(m, names[1]) : NULL;
        PyObject *key = NULL;
        int regular = 0;
        if (!props || screen_key(uk, props, uniq_name, &key, &regular) < 0) {
            PyErr_Clear();
            beyond = 1;
        } else if (key) {
            Py_INCREF(key);
            status[i] = SCREEN_CHECK;
            PyObject *topic = PyObject_GetAttr(m, names[2]);
            PyObject *delay = topic ? PyObject_GetAttr(m, names[3]) : NULL;
            if (!delay) {
                PyErr_Clear();
                beyond = 1;
            } else if (regular && PyUnicode_CheckExact(topic) && is_zero(delay)) {
                uint32_t h = 0;
                const unsigned char sep = '#';
                str_java_hash(topic, &h);
                h = java_hash(h, &sep, 1);
                str_java_hash(key, &h);
                int64_t hash = index_hash(h);
                int maybe = 0;
                for (Py_ssize_t g = 0; g < gens && !maybe; g++) {
                    uint64_t bits[3];
                    filter_bits((uint64_t)hash, masks[g], bits);
                    const unsigned char *bitmap = (const unsigned char *)maps[g].buf;
                    maybe = 1;
                    for (int b = 0; b < 3 && maybe; b++)
                        maybe = (bitmap[bits[b] >> 3] >> (bits[b] & 7)) & 1;
                }
                if (!maybe) {
                    status[i] = SCREEN_NEW;
                    hashes[i] = hash;
                }
            }
            Py_XDECREF(topic);
            Py_XDECREF(delay);
            if (!beyond) {
                PyObject *index = PyLong_FromSsize_t(i);
                PyObject *first = index ? PyDict_SetDefault(seen, key, index) : NULL;
                if (!first) {
                    Py_XDECREF(index);
                    Py_DECREF(key);
                    Py_XDECREF(uk);
                    Py_XDECREF(props);
                    goto done;
                }
                if (first != index) { /* a repeat within the batch: both take the full check */
                    status[i] = SCREEN_CHECK;
                    status[PyLong_AsSsize_t(first)] = SCREEN_CHECK;
                }
                Py_DECREF(index);
            }
            Py_DECREF(key);
        }
        Py_XDECREF(uk);
        Py_XDECREF(props);
    }
    Py_ssize_t fresh = 0;
    if (!(attention = PyList_New(0)))
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (beyond || status[i] == SCREEN_CHECK) {
            PyObject *index = PyLong_FromSsize_t(i);
            int failed = !index || PyList_Append(attention, index) < 0;
            Py_XDECREF(index);
            if (failed)
                goto done;
        } else if (status[i] == SCREEN_NEW) {
            hashes[fresh++] = hashes[i];
        }
    }
    result = Py_BuildValue("y#O", (const char *)hashes, (beyond ? 0 : fresh) * (Py_ssize_t)sizeof(int64_t),
                           attention);
done:
    for (Py_ssize_t g = 0; g < acquired; g++)
        PyBuffer_Release(&maps[g]);
    for (int a = 0; a < 4; a++)
        Py_XDECREF(names[a]);
    Py_XDECREF(uniq_name);
    Py_XDECREF(seen);
    Py_XDECREF(attention);
    PyMem_Free(maps);
    PyMem_Free(masks);
    PyMem_Free(status);
    PyMem_Free(hashes);
    return result;
}

/* ---- recover: the record walk of commit log recovery ---- */

enum { WALK_END = 0, WALK_BLANK = 1, WALK_ZEROS = 2, WALK_BAD = 3 };

/* Whether the record at `r`, `room` bytes before the end of its segment and `phys` in the log,
 * decodes as codec.decode would accept it (fields inside the record, topic and properties UTF-8,
 * body CRC) and names `phys` as its own offset. Returns its size, or 0. */
static int64_t good_record(const Layout *l, const unsigned char *r, Py_ssize_t room, int64_t phys)
{
    if (room < l->head_size)
        return 0;
    int64_t total = get_be(r + l->total, 4);
    int64_t magic = get_be(r + l->magic, 4);
    if ((magic != l->magic_v1 && magic != l->magic_v2) || total <= 0 || total > room)
        return 0;
    int64_t sys_flag = get_be(r + l->sys_flag, 4);
    Py_ssize_t cursor = l->head_size + ((sys_flag & l->born_v6_flag) ? l->host_v6 : l->host_v4) + l->store_ts_size
                        + ((sys_flag & l->store_v6_flag) ? l->host_v6 : l->host_v4);
    if (cursor + l->tail_size > total)
        return 0;
    int64_t body_len = get_be(r + cursor + l->body_len, 4);
    cursor += l->tail_size;
    if (body_len < 0 || body_len > total - cursor)
        return 0;
    const unsigned char *body = r + cursor;
    cursor += body_len;
    Py_ssize_t topic_len_size = magic == l->magic_v2 ? l->topic_len_v2 : l->topic_len_v1;
    if (cursor + topic_len_size > total)
        return 0;
    int64_t topic_len = get_be(r + cursor, (int)topic_len_size);
    cursor += topic_len_size;
    if (topic_len <= 0 || topic_len > total - cursor - l->props_len_size)
        return 0;
    const unsigned char *topic = r + cursor;
    cursor += topic_len;
    int64_t props_len = get_be(r + cursor, (int)l->props_len_size);
    cursor += l->props_len_size;
    if (props_len < 0 || cursor + props_len != total)
        return 0;
    if (get_be(r + l->phys, 8) != phys || !valid_utf8(topic, topic_len) || !valid_utf8(r + cursor, props_len))
        return 0;
    if (get_be(r + l->crc, 4) != (int64_t)(body_crc32(0, body, (size_t)body_len) & 0x7FFFFFFF))
        return 0;
    return total;
}

PyDoc_STRVAR(recover_walk_doc,
"recover_walk(buf, pos, base, layout) -> (status, pos)\n\n"
"Walk the good records of one commit log segment `buf` (starting at log offset `base`) from `pos`:\n"
"each must decode, match its body CRC and name its own offset. Stops with status 0 when fewer\n"
"than a BLANK's bytes are left, 1 at a BLANK filler, 2 at zeros (size and magic both 0), 3 at a\n"
"record that is not good; `pos` is where it stopped.");

static PyObject *recover_walk(PyObject *self, PyObject *args)
{
    Py_buffer buf = {0};
    PyObject *layout_obj;
    Py_ssize_t pos;
    long long base;
    Layout l;
    if (!PyArg_ParseTuple(args, "y*nLO", &buf, &pos, &base, &layout_obj))
        return NULL;
    if (!parse_layout(layout_obj, &l)) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (pos < 0 || pos > buf.len) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "position outside the buffer");
        return NULL;
    }
    const unsigned char *seg = (const unsigned char *)buf.buf;
    int status = WALK_END;
    Py_BEGIN_ALLOW_THREADS
    while (pos + 8 <= buf.len) {
        const unsigned char *r = seg + pos;
        int64_t total = get_be(r + l.total, 4), magic = get_be(r + l.magic, 4);
        if (magic == l.magic_blank) { /* like RocketMQ, its declared size is not checked */
            status = WALK_BLANK;
            break;
        }
        if (total == 0 && magic == 0) {
            status = WALK_ZEROS;
            break;
        }
        int64_t size = good_record(&l, r, buf.len - pos, base + pos);
        if (size == 0) {
            status = WALK_BAD;
            break;
        }
        pos += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return Py_BuildValue("in", status, pos);
}

/* ---- columnar decode (pipeline data source) ---- */

/* Records of a segment range straight into Arrow column buffers for the pipeline's row schema
 * (pipeline/records.py ARROW_SCHEMA), with the pushed filters applied: pipeline/columnar.py
 * passes the property and topic names, the copy kind texts and the filters, and wraps the
 * buffers into arrays. Every record is validated as codec.decode(check_crc=True) does; one it
 * cannot take exactly is left to the Python walk (status SCAN_SLOW). */

typedef struct {
    Growable offsets, data, valid; /* int32 offsets, bytes, validity bitmap (nullable columns) */
    Py_ssize_t nulls;
} ArrowText;

static int arrow_text_init(ArrowText *c)
{
    int32_t zero = 0;
    return grow_append_raw(&c->offsets, &zero, sizeof(zero));
}

static int arrow_text_end_value(ArrowText *c)
{
    int32_t end = (int32_t)c->data.len;
    return grow_append_raw(&c->offsets, &end, sizeof(end));
}

static int arrow_text_put(ArrowText *c, const void *s, Py_ssize_t n)
{
    return grow_append_raw(&c->data, s, n) && arrow_text_end_value(c);
}

/* Validity bit `row` of a nullable column, set when `present`. */
static int arrow_valid_put(ArrowText *c, Py_ssize_t row, int present)
{
    if (row % 8 == 0) {
        unsigned char zero = 0;
        if (!grow_append_raw(&c->valid, &zero, 1))
            return 0;
    }
    if (present)
        c->valid.data[row / 8] |= (unsigned char)(1u << (row % 8));
    else
        c->nulls++;
    return 1;
}

static int arrow_text_put_nullable(ArrowText *c, Py_ssize_t row, const void *s, Py_ssize_t n, int present)
{
    if (!arrow_valid_put(c, row, present))
        return 0;
    return present ? arrow_text_put(c, s, n) : arrow_text_end_value(c);
}

static void arrow_text_free(ArrowText *c)
{
    PyMem_RawFree(c->offsets.data);
    PyMem_RawFree(c->data.data);
    PyMem_RawFree(c->valid.data);
}

/* A set of byte strings from a tuple of bytes (borrowed), or every value when `any`. */
typedef struct {
    int any;
    Py_ssize_t count;
    const unsigned char **text;
    Py_ssize_t *len;
} ByteSet;

static int byte_set_of(PyObject *obj, ByteSet *set, const char *what)
{
    memset(set, 0, sizeof(*set));
    if (obj == Py_None) {
        set->any = 1;
        return 1;
    }
    if (!PyTuple_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: a tuple of bytes or None", what);
        return 0;
    }
    set->count = PyTuple_GET_SIZE(obj);
    set->text = PyMem_Malloc((set->count ? set->count : 1) * sizeof(*set->text));
    set->len = PyMem_Malloc((set->count ? set->count : 1) * sizeof(*set->len));
    if (!set->text || !set->len) {
        PyErr_NoMemory();
        return 0;
    }
    for (Py_ssize_t i = 0; i < set->count; i++) {
        PyObject *item = PyTuple_GET_ITEM(obj, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s: a tuple of bytes or None", what);
            return 0;
        }
        set->text[i] = (const unsigned char *)PyBytes_AS_STRING(item);
        set->len[i] = PyBytes_GET_SIZE(item);
    }
    return 1;
}

static void byte_set_free(ByteSet *set)
{
    PyMem_Free((void *)set->text);
    PyMem_Free(set->len);
}

static int byte_set_has(const ByteSet *set, const unsigned char *s, Py_ssize_t n)
{
    if (set->any)
        return 1;
    for (Py_ssize_t i = 0; i < set->count; i++)
        if (set->len[i] == n && memcmp(set->text[i], s, n) == 0)
            return 1;
    return 0;
}

static int bytes_equal(const unsigned char *s, Py_ssize_t n, const ByteSet *names, int which)
{
    return names->len[which] == n && memcmp(names->text[which], s, n) == 0;
}

static int bytes_start(const unsigned char *s, Py_ssize_t n, const ByteSet *names, int which)
{
    return names->len[which] <= n && memcmp(names->text[which], s, names->len[which]) == 0;
}

/* The plan's tables, in the order pipeline/columnar.py builds them. */
enum { NAME_TAGS, NAME_KEYS, NAME_UNIQ_KEY, NAME_ORIGIN_ID, NAME_DLQ_ORIGIN_ID, NAME_RESENT_FROM, NAME_COUNT };
enum { KIND_TOPIC_SCHEDULE, KIND_TOPIC_TIMER, KIND_PREFIX_RETRY, KIND_PREFIX_DLQ, KIND_TOPIC_TRACE,
       KIND_TOPIC_HALF, KIND_TOPIC_CHECK_MAX_TIME, KIND_TOPIC_OP_HALF, KIND_TOPIC_COUNT };
enum { KIND_ORIGINAL, KIND_SCHEDULED, KIND_RETRY, KIND_DEAD_LETTER, KIND_TRACE, KIND_RESENT, KIND_HALF, KIND_OP,
       KIND_COUNT };

typedef struct {
    ByteSet names, kind_topics, kind_texts, body_topics, topics, tags;
    long compressed_flag;
    int with_body;
    long long ts_low, ts_high, phys_low, phys_high, queue_low, queue_high;
    unsigned long kind_mask;
} DecodePlan;

static void decode_plan_free(DecodePlan *p)
{
    ByteSet *sets[] = {&p->names, &p->kind_topics, &p->kind_texts, &p->body_topics, &p->topics, &p->tags};
    for (int i = 0; i < 6; i++)
        byte_set_free(sets[i]);
}

static int decode_plan_of(PyObject *obj, DecodePlan *p)
{
    PyObject *names, *kind_topics, *kind_texts, *body_topics, *topic_set, *tag_set;
    memset(p, 0, sizeof(*p));
    if (!PyTuple_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "the decode plan is a tuple");
        return 0;
    }
    if (!PyArg_ParseTuple(obj, "O!O!O!lpO!O(LL)(LL)(LL)kO;decode plan", &PyTuple_Type, &names, &PyTuple_Type,
                          &kind_topics, &PyTuple_Type, &kind_texts, &p->compressed_flag, &p->with_body,
                          &PyTuple_Type, &body_topics, &topic_set, &p->ts_low, &p->ts_high, &p->phys_low,
                          &p->phys_high, &p->queue_low, &p->queue_high, &p->kind_mask, &tag_set))
        return 0;
    if (!byte_set_of(names, &p->names, "names") || !byte_set_of(kind_topics, &p->kind_topics, "kind topics") ||
        !byte_set_of(kind_texts, &p->kind_texts, "kind texts") ||
        !byte_set_of(body_topics, &p->body_topics, "body topics") || !byte_set_of(topic_set, &p->topics, "topics") ||
        !byte_set_of(tag_set, &p->tags, "tags"))
        return 0;
    if (p->names.any || p->names.count != NAME_COUNT || p->kind_topics.any ||
        p->kind_topics.count != KIND_TOPIC_COUNT || p->kind_texts.any || p->kind_texts.count != KIND_COUNT ||
        p->body_topics.any) {
        PyErr_SetString(PyExc_ValueError, "the decode plan's name tables have the wrong sizes");
        return 0;
    }
    return 1;
}

typedef struct {
    const unsigned char *name, *value;
    Py_ssize_t name_len, value_len;
} PropertyEntry;

#define MAX_DECODED_PROPERTIES 64

/* parse_properties into entries in first-seen order, a repeated name taking its last value; 0
 * when there are more distinct names than MAX_DECODED_PROPERTIES. */
static int decode_properties(const unsigned char *p, Py_ssize_t n, PropertyEntry *entries, int *count)
{
    *count = 0;
    Py_ssize_t chunk = 0;
    while (chunk <= n) {
        const unsigned char *end = memchr(p + chunk, '\x02', n - chunk);
        Py_ssize_t chunk_end = end ? end - p : n;
        Py_ssize_t len = chunk_end - chunk;
        const unsigned char *sep = len >= 3 ? memchr(p + chunk, '\x01', len) : NULL;
        Py_ssize_t at = sep ? sep - (p + chunk) : -1;
        if (at > 0 && at < len - 1) {
            PropertyEntry e = {p + chunk, p + chunk + at + 1, at, len - at - 1};
            int i = 0;
            while (i < *count && !(entries[i].name_len == e.name_len && memcmp(entries[i].name, e.name, at) == 0))
                i++;
            if (i == *count) {
                if (*count == MAX_DECODED_PROPERTIES)
                    return 0;
                (*count)++;
            }
            entries[i] = e;
        }
        chunk = chunk_end + 1;
    }
    return 1;
}

static const PropertyEntry *property_named(const PropertyEntry *entries, int count, const ByteSet *names,
                                           int which)
{
    for (int i = 0; i < count; i++)
        if (bytes_equal(entries[i].name, entries[i].name_len, names, which))
            return &entries[i];
    return NULL;
}

/* topics.message_copy_kind */
static int copy_kind_of(const unsigned char *topic, Py_ssize_t n, int resent_mark, const ByteSet *t)
{
    int dead_letter = bytes_start(topic, n, t, KIND_PREFIX_DLQ);
    if (resent_mark && !dead_letter)
        return KIND_RESENT;
    if (bytes_equal(topic, n, t, KIND_TOPIC_HALF) || bytes_equal(topic, n, t, KIND_TOPIC_CHECK_MAX_TIME))
        return KIND_HALF;
    if (bytes_equal(topic, n, t, KIND_TOPIC_OP_HALF))
        return KIND_OP;
    if (bytes_equal(topic, n, t, KIND_TOPIC_SCHEDULE) || bytes_equal(topic, n, t, KIND_TOPIC_TIMER))
        return KIND_SCHEDULED;
    if (bytes_start(topic, n, t, KIND_PREFIX_RETRY))
        return KIND_RETRY;
    if (dead_letter)
        return KIND_DEAD_LETTER;
    if (bytes_equal(topic, n, t, KIND_TOPIC_TRACE))
        return KIND_TRACE;
    return KIND_ORIGINAL;
}

static char *put_decimal(char *out, int64_t v)
{
    char digits[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *out++ = '-';
    while (n)
        *out++ = digits[--n];
    return out;
}

/* str(HostAddress): "a.b.c.d:port" or "[x:x:x:x:x:x:x:x]:port" (Java's form, no zero compression). */
static Py_ssize_t format_host(char *out, const unsigned char *address, int v6)
{
    static const char hex[] = "0123456789abcdef";
    char *q = out;
    if (v6) {
        *q++ = '[';
        for (int g = 0; g < 8; g++) {
            unsigned value = (unsigned)address[2 * g] << 8 | address[2 * g + 1];
            int started = 0;
            for (int shift = 12; shift >= 0; shift -= 4) {
                unsigned digit = (value >> shift) & 0xF;
                if (digit || started || shift == 0) {
                    *q++ = hex[digit];
                    started = 1;
                }
            }
            if (g < 7)
                *q++ = ':';
        }
        *q++ = ']';
    } else {
        for (int i = 0; i < 4; i++) {
            q = put_decimal(q, address[i]);
            if (i < 3)
                *q++ = '.';
        }
    }
    *q++ = ':';
    q = put_decimal(q, get_be(address + (v6 ? 16 : 4), 4));
    return q - out;
}

/* A host's text, formatted once while the host stays the same from record to record. */
typedef struct {
    unsigned char raw[20];
    Py_ssize_t raw_len, text_len;
    char text[64];
} HostText;

static void host_text(HostText *h, const unsigned char *host, int v6)
{
    Py_ssize_t n = v6 ? 20 : 8;
    if (h->raw_len == n && memcmp(h->raw, host, n) == 0)
        return;
    memcpy(h->raw, host, n);
    h->raw_len = n;
    h->text_len = format_host(h->text, host, v6);
}

enum { FIX_PHYS, FIX_SIZE, FIX_QUEUE_ID, FIX_QUEUE_OFFSET, FIX_FLAG, FIX_SYS_FLAG, FIX_BORN_TS, FIX_STORE_TS,
       FIX_RECONSUME, FIX_COUNT };
static const int fixed_width[FIX_COUNT] = {8, 4, 4, 8, 4, 4, 8, 8, 4};
enum { TXT_OFFSET_ID, TXT_UNIQUE_KEY, TXT_TOPIC, TXT_BORN_HOST, TXT_STORE_HOST, TXT_TAGS, TXT_KEY_ITEMS,
       TXT_PROP_NAMES, TXT_PROP_VALUES, TXT_BODY, TXT_COPY_KIND, TXT_ORIGINAL_ID, TXT_COUNT };

typedef struct {
    Growable fixed[FIX_COUNT];
    ArrowText text[TXT_COUNT];
    Growable key_lists, property_maps; /* int32 offsets of the keys lists and properties maps */
    Py_ssize_t rows;
} ArrowColumns;

static void arrow_columns_free(ArrowColumns *c)
{
    for (int i = 0; i < FIX_COUNT; i++)
        PyMem_RawFree(c->fixed[i].data);
    for (int i = 0; i < TXT_COUNT; i++)
        arrow_text_free(&c->text[i]);
    PyMem_RawFree(c->key_lists.data);
    PyMem_RawFree(c->property_maps.data);
}

/* The buffers of the last call, kept for the next one (with the interpreter lock held to take or
 * give them back): a batch's buffers are megabytes, and fresh ones cost page faults every call. */
static ArrowColumns kept_columns;
static int kept_columns_taken = 0;
#define MAX_KEPT_COLUMN_BYTES (64 * 1024 * 1024)

/* The kept buffers, emptied, for this call: a call running meanwhile (in another thread) takes
 * fresh ones. 0 when taken by another call. */
static int take_columns(ArrowColumns *c)
{
    memset(c, 0, sizeof(*c));
    if (kept_columns_taken)
        return 0;
    kept_columns_taken = 1;
    *c = kept_columns;
    for (int i = 0; i < FIX_COUNT; i++)
        c->fixed[i].len = 0;
    for (int i = 0; i < TXT_COUNT; i++) {
        c->text[i].offsets.len = c->text[i].data.len = c->text[i].valid.len = 0;
        c->text[i].nulls = 0;
    }
    c->key_lists.len = c->property_maps.len = 0;
    c->rows = 0;
    return 1;
}

/* Keep the buffers of the call that took the kept ones, unless they grew past the bound. */
static void give_back_columns(ArrowColumns *c)
{
    Py_ssize_t held = c->key_lists.cap + c->property_maps.cap;
    for (int i = 0; i < FIX_COUNT; i++)
        held += c->fixed[i].cap;
    for (int i = 0; i < TXT_COUNT; i++)
        held += c->text[i].offsets.cap + c->text[i].data.cap + c->text[i].valid.cap;
    if (held <= MAX_KEPT_COLUMN_BYTES) {
        kept_columns = *c;
    } else {
        arrow_columns_free(c);
        memset(&kept_columns, 0, sizeof(kept_columns));
    }
    kept_columns_taken = 0;
}

static int put_fixed(Growable *g, int64_t v, int width)
{
    if (width == 8)
        return grow_append_raw(g, &v, 8);
    int32_t narrow = (int32_t)v;
    return grow_append_raw(g, &narrow, 4);
}

static int put_list_end(Growable *g, Py_ssize_t end)
{
    int32_t value = (int32_t)end;
    return grow_append_raw(g, &value, sizeof(value));
}

static PyObject *growable_bytes(const Growable *g)
{
    return PyBytes_FromStringAndSize(g->data ? g->data : "", g->len);
}

/* (offsets, data, validity or None) of a text column */
static PyObject *arrow_text_tuple(const ArrowText *c, int nullable)
{
    PyObject *offsets = growable_bytes(&c->offsets), *data = growable_bytes(&c->data);
    PyObject *valid = nullable && c->nulls ? growable_bytes(&c->valid) : Py_NewRef(Py_None);
    if (!offsets || !data || !valid) {
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        Py_XDECREF(valid);
        return NULL;
    }
    return Py_BuildValue("(NNNn)", offsets, data, valid, nullable ? c->nulls : 0);
}

static int nullable_text(int which)
{
    return which == TXT_UNIQUE_KEY || which == TXT_TAGS || which == TXT_BODY;
}

/* Where each part of a validated record lies. */
typedef struct {
    const unsigned char *r, *born_host, *store_host, *body, *topic, *props;
    int64_t total, sys_flag, store_ts, body_len, topic_len, props_len;
} RecordParts;

/* The record at r (with `room` bytes to the end of the buffer) split into its parts, checked as
 * codec.decode checks it; 0 when the Python decoder is to look at it. */
static int record_parts(const Layout *l, const unsigned char *r, Py_ssize_t room, RecordParts *m)
{
    if (room < l->head_size)
        return 0;
    int64_t total = get_be(r + l->total, 4), magic = get_be(r + l->magic, 4);
    if ((magic != l->magic_v1 && magic != l->magic_v2) || total <= 0 || total > room)
        return 0;
    m->r = r;
    m->total = total;
    m->sys_flag = get_be(r + l->sys_flag, 4);
    Py_ssize_t cursor = l->head_size;
    m->born_host = r + cursor;
    cursor += (m->sys_flag & l->born_v6_flag) ? l->host_v6 : l->host_v4;
    m->store_ts = get_be(r + cursor, (int)l->store_ts_size);
    cursor += l->store_ts_size;
    m->store_host = r + cursor;
    cursor += (m->sys_flag & l->store_v6_flag) ? l->host_v6 : l->host_v4;
    if (cursor + l->tail_size > total)
        return 0;
    m->body_len = get_be(r + cursor + l->body_len, 4);
    cursor += l->tail_size;
    if (m->body_len < 0 || m->body_len > total - cursor)
        return 0;
    m->body = r + cursor;
    cursor += m->body_len;
    Py_ssize_t topic_len_size = magic == l->magic_v2 ? l->topic_len_v2 : l->topic_len_v1;
    if (cursor + topic_len_size > total)
        return 0;
    m->topic_len = get_be(r + cursor, (int)topic_len_size);
    cursor += topic_len_size;
    if (m->topic_len <= 0 || m->topic_len > total - cursor - l->props_len_size)
        return 0;
    m->topic = r + cursor;
    cursor += m->topic_len;
    m->props_len = get_be(r + cursor, (int)l->props_len_size);
    cursor += l->props_len_size;
    if (m->props_len < 0 || cursor + m->props_len != total)
        return 0;
    m->props = r + cursor;
    if (!valid_utf8(m->topic, m->topic_len) || !valid_utf8(m->props, m->props_len))
        return 0;
    int64_t crc = body_crc32(0, m->body, (size_t)m->body_len) & 0x7FFFFFFF;
    return crc == get_be(r + l->crc, 4);
}

static int in_range(int64_t v, long long low, long long high)
{
    return low <= v && v <= high;
}

static const unsigned char hex_upper[] = "0123456789ABCDEF";

/* One row of a record that passed the filters; 0 when out of memory. */
static int put_row(ArrowColumns *c, const Layout *l, const DecodePlan *plan, const RecordParts *m,
                   const PropertyEntry *props, int prop_count, int kind, HostText *born, HostText *store)
{
    const unsigned char *r = m->r;
    int64_t fixed[FIX_COUNT] = {get_be(r + l->phys, 8), m->total, get_be(r + l->queue_id, 4),
                                get_be(r + l->queue_offset, 8), get_be(r + l->flag, 4), m->sys_flag,
                                get_be(r + l->born_ts, 8), m->store_ts, 0};
    Py_ssize_t tail = m->body - r - l->tail_size;
    fixed[FIX_RECONSUME] = get_be(r + tail + l->reconsume, 4);
    for (int i = 0; i < FIX_COUNT; i++)
        if (!put_fixed(&c->fixed[i], fixed[i], fixed_width[i]))
            return 0;
    Py_ssize_t row = c->rows;
    int store_v6 = (m->sys_flag & l->store_v6_flag) != 0;
    char offset_id[56];
    Py_ssize_t id_len = 0, raw_len = store_v6 ? 20 : 8;
    for (Py_ssize_t i = 0; i < raw_len; i++) {
        offset_id[id_len++] = hex_upper[m->store_host[i] >> 4];
        offset_id[id_len++] = hex_upper[m->store_host[i] & 0xF];
    }
    for (int i = 0; i < 8; i++) {
        offset_id[id_len++] = hex_upper[(r + l->phys)[i] >> 4];
        offset_id[id_len++] = hex_upper[(r + l->phys)[i] & 0xF];
    }
    const PropertyEntry *uniq = property_named(props, prop_count, &plan->names, NAME_UNIQ_KEY);
    const PropertyEntry *tags = property_named(props, prop_count, &plan->names, NAME_TAGS);
    const PropertyEntry *keys = property_named(props, prop_count, &plan->names, NAME_KEYS);
    const PropertyEntry *origin = property_named(props, prop_count, &plan->names, NAME_ORIGIN_ID);
    if (!origin)
        origin = property_named(props, prop_count, &plan->names, NAME_DLQ_ORIGIN_ID);
    if (!origin)
        origin = uniq;
    host_text(born, m->born_host, (m->sys_flag & l->born_v6_flag) != 0);
    host_text(store, m->store_host, store_v6);
    ArrowText *t = c->text;
    int wants_body = plan->with_body || byte_set_has(&plan->body_topics, m->topic, m->topic_len);
    if (!arrow_text_put(&t[TXT_OFFSET_ID], offset_id, id_len) ||
        !arrow_text_put_nullable(&t[TXT_UNIQUE_KEY], row, uniq ? uniq->value : NULL, uniq ? uniq->value_len : 0,
                                 uniq != NULL) ||
        !arrow_text_put(&t[TXT_TOPIC], m->topic, m->topic_len) ||
        !arrow_text_put(&t[TXT_BORN_HOST], born->text, born->text_len) ||
        !arrow_text_put(&t[TXT_STORE_HOST], store->text, store->text_len) ||
        !arrow_text_put_nullable(&t[TXT_TAGS], row, tags ? tags->value : NULL, tags ? tags->value_len : 0,
                                 tags != NULL) ||
        !arrow_text_put_nullable(&t[TXT_BODY], row, m->body, m->body_len, wants_body) ||
        !arrow_text_put(&t[TXT_COPY_KIND], plan->kind_texts.text[kind], plan->kind_texts.len[kind]) ||
        !(origin ? arrow_text_put(&t[TXT_ORIGINAL_ID], origin->value, origin->value_len)
                 : arrow_text_put(&t[TXT_ORIGINAL_ID], offset_id, id_len)))
        return 0;
    for (Py_ssize_t i = 0; keys && i < keys->value_len;) { /* split_keys: single spaces, no empty tokens */
        while (i < keys->value_len && keys->value[i] == ' ')
            i++;
        Py_ssize_t token = i;
        while (i < keys->value_len && keys->value[i] != ' ')
            i++;
        if (i > token && !arrow_text_put(&t[TXT_KEY_ITEMS], keys->value + token, i - token))
            return 0;
    }
    for (int i = 0; i < prop_count; i++)
        if (!arrow_text_put(&t[TXT_PROP_NAMES], props[i].name, props[i].name_len) ||
            !arrow_text_put(&t[TXT_PROP_VALUES], props[i].value, props[i].value_len))
            return 0;
    if (!put_list_end(&c->key_lists, t[TXT_KEY_ITEMS].offsets.len / 4 - 1) ||
        !put_list_end(&c->property_maps, t[TXT_PROP_NAMES].offsets.len / 4 - 1))
        return 0;
    c->rows++;
    return 1;
}

/* Whether a row of `total` record bytes may still go into every text column without its int32
 * offsets overflowing (a row adds at most the record's bytes plus formatted ids and hosts). */
static int columns_have_room(const ArrowColumns *c, int64_t total)
{
    for (int i = 0; i < TXT_COUNT; i++)
        if (c->text[i].data.len + total + 256 > INT32_MAX)
            return 0;
    return 1;
}

PyDoc_STRVAR(decode_columns_doc,
"decode_columns(buf, pos, stop, layout, base, max_rows, max_records, plan)\n"
"    -> (status, pos, records, rows, fixed, texts, key_lists, property_maps)\n\n"
"Decode the records of a segment buffer (based at commit log offset `base`) that start in\n"
"[pos, stop) into Arrow column buffers, keeping the rows that pass the plan's filters (see\n"
"pipeline/columnar.py). `records` counts the records read, `rows` the rows kept; `fixed` holds one\n"
"native-order buffer per fixed-width column, `texts` (offsets, data, validity or None, nulls) per\n"
"text column, and the lists' and maps' int32 offsets follow. status: 0 reached stop or the end of\n"
"the buffer, 1 a BLANK or zeros at pos, 2 the record at pos needs the Python walk, 3 max_rows kept\n"
"or max_records read.");

static PyObject *decode_columns(PyObject *self, PyObject *args)
{
    Py_buffer buf = {0};
    PyObject *layout_obj, *plan_obj, *result = NULL;
    Py_ssize_t pos, stop, max_rows, max_records;
    long long base;
    Layout l;
    DecodePlan plan;
    ArrowColumns cols;
    memset(&cols, 0, sizeof(cols));
    memset(&plan, 0, sizeof(plan));
    int owns_kept = 0;

    if (!PyArg_ParseTuple(args, "y*nnOLnnO", &buf, &pos, &stop, &layout_obj, &base, &max_rows, &max_records,
                          &plan_obj))
        return NULL;
    if (!parse_layout(layout_obj, &l) || !decode_plan_of(plan_obj, &plan))
        goto done;
    if (pos < 0 || max_rows <= 0 || max_records <= 0) {
        PyErr_SetString(PyExc_ValueError, "pos, max_rows and max_records must be positive");
        goto done;
    }
    if (stop > buf.len)
        stop = buf.len;
    owns_kept = take_columns(&cols);
    int ok = 1;
    for (int i = 0; i < TXT_COUNT && ok; i++)
        ok = arrow_text_init(&cols.text[i]);
    ok = ok && put_list_end(&cols.key_lists, 0) && put_list_end(&cols.property_maps, 0);
    PropertyEntry *entries = PyMem_Malloc(MAX_DECODED_PROPERTIES * sizeof(PropertyEntry));
    if (!ok || !entries) {
        PyMem_Free(entries);
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *data = (const unsigned char *)buf.buf;
    Py_ssize_t records = 0;
    int status = SCAN_END;
    HostText born = {{0}, 0, 0, {0}}, store = {{0}, 0, 0, {0}};
    const unsigned char *last_topic = NULL;
    int64_t last_topic_len = 0;
    int last_topic_wanted = 0;

    Py_BEGIN_ALLOW_THREADS
    while (pos < stop && pos + 8 <= buf.len) {
        if (cols.rows >= max_rows || records >= max_records) {
            status = SCAN_FULL;
            break;
        }
        const unsigned char *r = data + pos;
        if (get_be(r + l.magic, 4) == l.magic_blank || get_be(r + l.total, 4) == 0) {
            status = SCAN_BLANK;
            break;
        }
        RecordParts m;
        int prop_count = 0;
        if (!record_parts(&l, r, buf.len - pos, &m) || get_be(r + l.phys, 8) != base + pos ||
            !decode_properties(m.props, m.props_len, entries, &prop_count)) {
            status = SCAN_SLOW;
            break;
        }
        int wants_body = plan.with_body || byte_set_has(&plan.body_topics, m.topic, m.topic_len);
        if ((wants_body && (m.sys_flag & plan.compressed_flag)) || !columns_have_room(&cols, m.total)) {
            /* a body to decompress, or a batch too full for this row: Python, or the next batch */
            status = cols.rows ? SCAN_FULL : SCAN_SLOW;
            break;
        }
        records++;
        pos += m.total;
        if (!last_topic || last_topic_len != m.topic_len || memcmp(last_topic, m.topic, m.topic_len) != 0) {
            last_topic = m.topic;
            last_topic_len = m.topic_len;
            last_topic_wanted = byte_set_has(&plan.topics, m.topic, m.topic_len);
        }
        if (!last_topic_wanted || !in_range(m.store_ts, plan.ts_low, plan.ts_high) ||
            !in_range(get_be(r + l.phys, 8), plan.phys_low, plan.phys_high) ||
            !in_range(get_be(r + l.queue_id, 4), plan.queue_low, plan.queue_high))
            continue;
        int resent = property_named(entries, prop_count, &plan.names, NAME_RESENT_FROM) != NULL;
        int kind = copy_kind_of(m.topic, m.topic_len, resent, &plan.kind_topics);
        if (!(plan.kind_mask & (1ul << kind)))
            continue;
        if (!plan.tags.any) {
            const PropertyEntry *tags = property_named(entries, prop_count, &plan.names, NAME_TAGS);
            if (!tags || !byte_set_has(&plan.tags, tags->value, tags->value_len))
                continue;
        }
        if (!put_row(&cols, &l, &plan, &m, entries, prop_count, kind, &born, &store)) {
            ok = 0;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(entries);
    if (!ok) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *fixed = PyTuple_New(FIX_COUNT), *texts = PyTuple_New(TXT_COUNT);
    if (!fixed || !texts) {
        Py_XDECREF(fixed);
        Py_XDECREF(texts);
        goto done;
    }
    for (int i = 0; i < FIX_COUNT && ok; i++) {
        PyObject *b = growable_bytes(&cols.fixed[i]);
        ok = b != NULL;
        if (ok)
            PyTuple_SET_ITEM(fixed, i, b);
    }
    for (int i = 0; i < TXT_COUNT && ok; i++) {
        PyObject *t = arrow_text_tuple(&cols.text[i], nullable_text(i));
        ok = t != NULL;
        if (ok)
            PyTuple_SET_ITEM(texts, i, t);
    }
    if (!ok) {
        Py_DECREF(fixed);
        Py_DECREF(texts);
        goto done;
    }
    result = Py_BuildValue("(innnNNNN)", status, pos, records, cols.rows, fixed, texts, growable_bytes(&cols.key_lists),
                           growable_bytes(&cols.property_maps));
done:
    decode_plan_free(&plan);
    if (owns_kept)
        give_back_columns(&cols);
    else
        arrow_columns_free(&cols);
    PyBuffer_Release(&buf);
    return result;
}

/* ---- content search ---- */
/* content_scan: the records of a window and topics whose body or a property value holds a text. */

/* One record content_scan reports; store/scan/content.py declares the matching numpy dtype. */
typedef struct {
    int64_t pos;       /* the record's position in the buffer */
    int32_t kind;      /* CONTENT_CANDIDATE, CONTENT_BODY or CONTENT_PROPERTY */
    int32_t at;        /* where the text starts within the body or the properties */
    int32_t body_at;   /* the body's position within the record */
    int32_t body_len;
    int32_t props_at;  /* the properties' position within the record */
    int32_t props_len;
    int32_t sys_flag;
    int32_t unused;
} ContentHit;

/* A candidate is left to the Python side: a compressed body, or any record when matching a
 * regular expression. */
enum { CONTENT_CANDIDATE = 0, CONTENT_BODY = 1, CONTENT_PROPERTY = 2 };
enum { WHERE_BODY = 1, WHERE_PROPERTIES = 2 };
#define CONTENT_MAX_TOPICS 64

/* The first match of `needle` within a property value (the part of a name\x01value pair after
 * the first \x01, as find_properties splits them): its offset in `p`, or -1. */
static Py_ssize_t property_value_find(const unsigned char *p, Py_ssize_t n, const unsigned char *needle,
                                      Py_ssize_t needle_len)
{
    Py_ssize_t chunk = 0;
    while (chunk <= n) {
        const unsigned char *end = memchr(p + chunk, '\x02', n - chunk);
        Py_ssize_t chunk_end = end ? end - p : n;
        Py_ssize_t len = chunk_end - chunk;
        if (len >= 3) {
            const unsigned char *sep = memchr(p + chunk, '\x01', len);
            Py_ssize_t at = sep ? sep - (p + chunk) : -1;
            if (at > 0 && at < len - 1) {
                const unsigned char *value = p + chunk + at + 1;
                const unsigned char *found = memmem(value, len - at - 1, needle, needle_len);
                if (found)
                    return found - p;
            }
        }
        chunk = chunk_end + 1;
    }
    return -1;
}

PyDoc_STRVAR(content_scan_doc,
"content_scan(buf, pos, limit, end, layout, begin_ms, end_ms, topics, needle, where, max_hits)\n"
"    -> (status, pos, records, hits)\n\n"
"Walk the records starting before `limit` (each may run on to `end`) from `pos`, keep those\n"
"stored within [begin_ms, end_ms] in one of `topics` (a tuple of bytes; empty: any topic), and\n"
"report in `hits` (packed ContentHit) each whose body (`where` bit 1) or a property value (bit 2)\n"
"contains `needle`; with `needle` None, or a compressed body to search, the record is reported\n"
"as a candidate for the caller to match. `records` counts the records walked.\n"
"status: 0 reached limit, 1 BLANK at pos, 2 the record at pos does not parse, 3 max_hits reported.");

static PyObject *content_scan(PyObject *self, PyObject *args)
{
    Py_buffer buf = {0};
    PyObject *layout_obj, *topics, *needle_obj;
    Py_ssize_t pos, limit, end, max_hits;
    long long begin_ms, end_ms;
    int where;
    Layout l;
    Growable hits = {0};
    PyObject *result = NULL;
    const unsigned char *topic_names[CONTENT_MAX_TOPICS];
    Py_ssize_t topic_lens[CONTENT_MAX_TOPICS];
    const unsigned char *needle = NULL;
    Py_ssize_t needle_len = 0;

    if (!PyArg_ParseTuple(args, "y*nnnOLLO!Oin", &buf, &pos, &limit, &end, &layout_obj, &begin_ms, &end_ms,
                          &PyTuple_Type, &topics, &needle_obj, &where, &max_hits))
        return NULL;
    if (!parse_layout(layout_obj, &l))
        goto done;
    Py_ssize_t topic_count = PyTuple_GET_SIZE(topics);
    if (topic_count > CONTENT_MAX_TOPICS) {
        PyErr_Format(PyExc_ValueError, "at most %d topics", CONTENT_MAX_TOPICS);
        goto done;
    }
    for (Py_ssize_t i = 0; i < topic_count; i++) {
        PyObject *name = PyTuple_GET_ITEM(topics, i);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "topics must be bytes");
            goto done;
        }
        topic_names[i] = (const unsigned char *)PyBytes_AS_STRING(name);
        topic_lens[i] = PyBytes_GET_SIZE(name);
    }
    if (needle_obj != Py_None) {
        if (!PyBytes_Check(needle_obj) || PyBytes_GET_SIZE(needle_obj) == 0) {
            PyErr_SetString(PyExc_ValueError, "needle must be non-empty bytes or None");
            goto done;
        }
        needle = (const unsigned char *)PyBytes_AS_STRING(needle_obj);
        needle_len = PyBytes_GET_SIZE(needle_obj);
    }
    if (pos < 0 || max_hits < 1) {
        PyErr_SetString(PyExc_ValueError, "pos must not be negative and max_hits must be positive");
        goto done;
    }
    if (end > buf.len)
        end = buf.len;
    const unsigned char *base = (const unsigned char *)buf.buf;
    Py_ssize_t min_size = l.head_size + 2 * l.host_v4 + l.store_ts_size + l.tail_size;
    Py_ssize_t records = 0, found = 0;
    int status = SCAN_END, out_of_memory = 0;
    const unsigned char *last_topic = NULL;
    Py_ssize_t last_topic_len = 0;
    int last_topic_wanted = 0;

    PyThreadState *released = PyEval_SaveThread();
    while (pos < limit && pos + 8 <= end) {
        const unsigned char *r = base + pos;
        int64_t total = get_be(r + l.total, 4);
        int64_t magic = get_be(r + l.magic, 4);
        if (magic == l.magic_blank) {
            status = SCAN_BLANK;
            break;
        }
        if ((magic != l.magic_v1 && magic != l.magic_v2) || total < min_size || total > end - pos) {
            status = SCAN_SLOW;
            break;
        }
        int64_t sys_flag = get_be(r + l.sys_flag, 4);
        Py_ssize_t cursor = l.head_size + ((sys_flag & l.born_v6_flag) ? l.host_v6 : l.host_v4);
        int64_t store_ts = get_be(r + cursor, (int)l.store_ts_size);
        cursor += l.store_ts_size + ((sys_flag & l.store_v6_flag) ? l.host_v6 : l.host_v4);
        if (cursor + l.tail_size > total) {
            status = SCAN_SLOW;
            break;
        }
        int64_t body_len = get_be(r + cursor + l.body_len, 4);
        cursor += l.tail_size;
        if (body_len < 0 || body_len > total - cursor) {
            status = SCAN_SLOW;
            break;
        }
        Py_ssize_t body_at = cursor;
        cursor += body_len;
        Py_ssize_t topic_len_size = magic == l.magic_v2 ? l.topic_len_v2 : l.topic_len_v1;
        if (cursor + topic_len_size > total) {
            status = SCAN_SLOW;
            break;
        }
        int64_t topic_len = get_be(r + cursor, (int)topic_len_size);
        cursor += topic_len_size;
        if (topic_len <= 0 || topic_len > total - cursor - l.props_len_size) {
            status = SCAN_SLOW;
            break;
        }
        const unsigned char *topic = r + cursor;
        cursor += topic_len;
        int64_t props_len = get_be(r + cursor, (int)l.props_len_size);
        cursor += l.props_len_size;
        if (props_len < 0 || cursor + props_len != total) {
            status = SCAN_SLOW;
            break;
        }
        Py_ssize_t props_at = cursor;
        records++;

        if (store_ts < begin_ms || store_ts > end_ms) {
            pos += total;
            continue;
        }
        if (topic_count) {
            if (!last_topic || last_topic_len != topic_len || memcmp(last_topic, topic, topic_len) != 0) {
                last_topic_wanted = 0;
                for (Py_ssize_t i = 0; i < topic_count && !last_topic_wanted; i++)
                    last_topic_wanted = topic_lens[i] == topic_len && memcmp(topic_names[i], topic, topic_len) == 0;
                last_topic = topic;
                last_topic_len = topic_len;
            }
            if (!last_topic_wanted) {
                pos += total;
                continue;
            }
        }
        int kind = -1;
        Py_ssize_t at = 0;
        if (!needle || ((where & WHERE_BODY) && (sys_flag & 1))) {
            kind = CONTENT_CANDIDATE;
        } else {
            if (where & WHERE_BODY) {
                const unsigned char *hit = memmem(r + body_at, body_len, needle, needle_len);
                if (hit) {
                    kind = CONTENT_BODY;
                    at = hit - (r + body_at);
                }
            }
            if (kind < 0 && (where & WHERE_PROPERTIES)) {
                at = property_value_find(r + props_at, props_len, needle, needle_len);
                if (at >= 0)
                    kind = CONTENT_PROPERTY;
            }
        }
        if (kind >= 0) {
            ContentHit hit = {
                .pos = pos, .kind = kind, .at = (int32_t)at, .body_at = (int32_t)body_at,
                .body_len = (int32_t)body_len, .props_at = (int32_t)props_at, .props_len = (int32_t)props_len,
                .sys_flag = (int32_t)sys_flag, .unused = 0,
            };
            if (!grow_append_raw(&hits, &hit, sizeof(hit))) {
                out_of_memory = 1;
                break;
            }
            found++;
        }
        pos += total;
        if (found >= max_hits) {
            status = SCAN_FULL;
            break;
        }
    }
    PyEval_RestoreThread(released);
    if (out_of_memory) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("inny#", status, pos, records, hits.data ? hits.data : "", hits.len);
done:
    PyMem_RawFree(hits.data);
    PyBuffer_Release(&buf);
    return result;
}

/* ---- store check ---- */

PyDoc_STRVAR(crc_walk_doc,
"crc_walk(buf, pos, limit, layout, until=limit) -> pos\n\n"
"Walk commit log records from `pos` while each lies whole before `limit` with a body CRC\n"
"that matches the one it states, starting no record at or past `until`. Returns where the\n"
"walk stopped: `limit`, the first record boundary at or past `until`, or a filler or a record\n"
"that the Python decoder must read (a corrupt one, or one this walk cannot vouch for).");

static PyObject *crc_walk(PyObject *self, PyObject *args)
{
    Py_buffer buf = {0};
    PyObject *layout_obj;
    Py_ssize_t pos, limit, until = PY_SSIZE_T_MAX;
    Layout l;
    if (!PyArg_ParseTuple(args, "y*nnO|n", &buf, &pos, &limit, &layout_obj, &until))
        return NULL;
    if (!parse_layout(layout_obj, &l) || pos < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "negative position");
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (limit > buf.len)
        limit = buf.len;
    const unsigned char *base = (const unsigned char *)buf.buf;
    Py_ssize_t min_size = l.head_size + 2 * l.host_v4 + l.store_ts_size + l.tail_size;
    Py_BEGIN_ALLOW_THREADS
    while (pos + 8 <= limit && pos < until) {
        const unsigned char *r = base + pos;
        int64_t total = get_be(r + l.total, 4);
        int64_t magic = get_be(r + l.magic, 4);
        if ((magic != l.magic_v1 && magic != l.magic_v2) || total < min_size || total > limit - pos)
            break;
        int64_t sys_flag = get_be(r + l.sys_flag, 4);
        Py_ssize_t cursor = l.head_size + ((sys_flag & l.born_v6_flag) ? l.host_v6 : l.host_v4) + l.store_ts_size +
                            ((sys_flag & l.store_v6_flag) ? l.host_v6 : l.host_v4);
        if (cursor + l.tail_size > total)
            break;
        int64_t body_len = get_be(r + cursor + l.body_len, 4);
        cursor += l.tail_size;
        if (body_len < 0 || body_len > total - cursor)
            break;
        uint32_t crc = body_crc32(0, r + cursor, (size_t)body_len) & 0x7FFFFFFFu;
        if ((int64_t)crc != get_be(r + l.crc, 4))
            break;
        pos += total;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyLong_FromSsize_t(pos);
}

PyDoc_STRVAR(index_reachable_doc,
"index_reachable(buf, layout, slots, index_count, begin_ts) -> bytes\n\n"
"One byte per entry number from 0 to the last readable one up to `index_count`: 1 where\n"
"IndexFile.select, asked for that entry's hash at any time from 0 on, yields the entry (its\n"
"chain walked from the slot of its hash, by select's rules). layout as index_put's.");

static PyObject *index_reachable(PyObject *self, PyObject *args)
{
    Py_buffer buf = {0};
    Py_ssize_t slot_table, slot_size, entries_at, entry_size, e_hash, e_phys, e_diff, e_prev;
    long long slots, index_count, begin_ts;
    PyObject *result = NULL;
    int32_t *walked_by = NULL;
    if (!PyArg_ParseTuple(args, "y*(nnnnnnnn)LLL", &buf, &slot_table, &slot_size, &entries_at, &entry_size,
                          &e_hash, &e_phys, &e_diff, &e_prev, &slots, &index_count, &begin_ts))
        return NULL;
    if (slots <= 0 || slots >= INT32_MAX || slot_table + slots * slot_size > entries_at || entries_at > buf.len ||
        entry_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "index geometry does not match the buffer");
        goto done;
    }
    long long last = (buf.len - entries_at) / entry_size - 1; /* the last entry number inside the buffer */
    if (last > index_count)
        last = index_count;
    if (last < 0)
        last = 0;
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)last + 1);
    walked_by = PyMem_Calloc((size_t)last + 1, sizeof(int32_t));
    if (!result || !walked_by) {
        Py_CLEAR(result);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    unsigned char *reachable = (unsigned char *)PyBytes_AS_STRING(result);
    memset(reachable, 0, (size_t)last + 1);
    const unsigned char *base = (const unsigned char *)buf.buf;
    Py_BEGIN_ALLOW_THREADS
    for (long long slot = 0; slot < slots && index_count > 1; slot++) {
        int64_t number = get_be(base + slot_table + slot * slot_size, (int)slot_size);
        if (number <= 0 || number > index_count)
            continue;
        int32_t walk = (int32_t)slot + 1;
        while (number <= last) {
            const unsigned char *entry = base + entries_at + number * entry_size;
            int64_t diff = get_be(entry + e_diff, 4);
            if (diff < 0)
                break;
            int64_t when = begin_ts + diff * 1000;
            int64_t hash = get_be(entry + e_hash, 4);
            if (((hash % slots) + slots) % slots == slot && when >= 0)
                reachable[number] = 1;
            walked_by[number] = walk;
            int64_t prev = get_be(entry + e_prev, 4);
            if (prev <= 0 || prev > index_count || when < 0 || (prev <= last && walked_by[prev] == walk))
                break;
            number = prev;
        }
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(walked_by);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_run", encode_run, METH_VARARGS, encode_run_doc},
    {"encode_one", encode_one, METH_VARARGS, encode_one_doc},
    {"scan_records", scan_records, METH_VARARGS, scan_records_doc},
    {"build_items", build_items, METH_VARARGS, build_items_doc},
    {"populate", populate, METH_VARARGS, populate_doc},
    {"index_put", index_put, METH_VARARGS, index_put_doc},
    {"put_results", put_results, METH_VARARGS, put_results_doc},
    {"assign_queue_offsets", assign_queue_offsets, METH_VARARGS, assign_queue_offsets_doc},
    {"index_key_hash", (PyCFunction)(void (*)(void))index_key_hash, METH_FASTCALL, index_key_hash_doc},
    {"filter_add", filter_add, METH_VARARGS, filter_add_doc},
    {"filter_has", (PyCFunction)(void (*)(void))filter_has, METH_FASTCALL, filter_has_doc},
    {"dedupe_screen", dedupe_screen, METH_VARARGS, dedupe_screen_doc},
    {"crc32", crc32_of, METH_VARARGS, crc32_doc},
    {"recover_walk", recover_walk, METH_VARARGS, recover_walk_doc},
    {"decode_columns", decode_columns, METH_VARARGS, decode_columns_doc},
    {"content_scan", content_scan, METH_VARARGS, content_scan_doc},
    {"crc_walk", crc_walk, METH_VARARGS, crc_walk_doc},
    {"index_reachable", index_reachable, METH_VARARGS, index_reachable_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "store._recordio",
    .m_doc = "Compiled encode and dispatch-scan loops of the commit log.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__recordio(void)
{
    return PyModuleDef_Init(&module);
}
