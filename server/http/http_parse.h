/* http_parse.h - psdbd's parsers of request parts (routes, Range, validators, dates), kept free
 * of libmicrohttpd so that unit tests and fuzz targets call them directly. */
#ifndef PSDBD_HTTP_PARSE_H
#define PSDBD_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

/* Which route a decoded request path is for; *tail receives the path parameter when there is one
 * (the digest, the id, "{name}/psdbs" for the application listing, the report name after
 * /v1/stats/, the dashboard's own path), else NULL. */
psdbd_route psdbd_route_of(const char *url, const char **tail);

/* True when a request target as received (before percent-decoding) encodes a NUL ("%00"): the
 * decoded path or query would end early there, so such a request is refused (400). */
int psdbd_uri_has_encoded_nul(const char *raw);

/* True when `s` is exactly the canonical base64 of a 64-byte Ed25519 signature (88 characters,
 * "==" padding, zero pad bits): what X-Psdb-Signature must be. */
int psdbd_is_signature_b64(const char *s);

/* The statement fields of a publish whose body is chunked: they travel in its trailer
 * (schema/HTTP.md, POST /v1/psdbs), and its Trailer header must name all three. */
#define PSDBD_TRAILER_SHA256 1u
#define PSDBD_TRAILER_SIZE 2u
#define PSDBD_TRAILER_SIGNATURE 4u
#define PSDBD_TRAILER_ALL 7u
#define PSDBD_TRAILER_FIELDS 3
/* The field name of bit (1u << i) of the PSDBD_TRAILER_* set, i < PSDBD_TRAILER_FIELDS. */
const char *psdbd_trailer_field(unsigned i);
/* The PSDBD_TRAILER_* bits of the statement fields that a Trailer header value names (a list of
 * field names separated by commas and optional spaces or tabs, RFC 9110 6.6.2; names compare
 * without case). Other names are ignored. NULL: 0. */
unsigned psdbd_trailer_names(const char *value);

/* Parses one "bytes=" Range header against a blob of `size` bytes. Returns 1 with [*off, *off +
 * *len) for a satisfiable single range; 0 when the header is to be ignored (absent, malformed,
 * several ranges); -1 when unsatisfiable (416). */
int psdbd_parse_range(const char *h, uint64_t size, uint64_t *off, uint64_t *len);

/* One range of a multi-range request: [off, off + len). */
typedef struct psdbd_range {
    uint64_t off, len;
} psdbd_range;

/* Parses a "bytes=" Range header of several ranges ("a-b,c-d,...", each with both ends, in
 * ascending order, disjoint and not adjacent, all inside the blob) into out[0..max). Returns their
 * count (2..max); 0 when the header is not such a list (absent, one range, a suffix or open range,
 * unordered, overlapping or touching ranges, any past the end, more than max, malformed): the
 * caller then treats it as psdbd_parse_range does. What delta updates ask for (schema/HTTP.md). */
size_t psdbd_parse_ranges(const char *h, uint64_t size, psdbd_range *out, size_t max);

/* True when an If-None-Match value lists the ETag of `sha` (weak comparison: W/ tags match too)
 * or is "*". NULL or malformed: false. */
int psdbd_etag_matches(const char *inm, const char *sha);

/* True when an If-Match value lists the ETag of `sha` by strong comparison (a W/ tag never
 * matches) or is "*". NULL or malformed: false. */
int psdbd_etag_matches_strong(const char *im, const char *sha);

/* Parses an HTTP-date (RFC 9110 5.6.7: IMF-fixdate, and the obsolete RFC 850 and asctime forms
 * that recipients must accept) into seconds since the Unix epoch. 0, or -1 when malformed. */
int psdbd_parse_http_date(const char *s, int64_t *out);

/* Formats a Unix time as an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"); buf of at least 30
 * bytes. Returns buf. */
const char *psdbd_format_http_date(int64_t t, char *buf, size_t size);

/* The validator headers of a blob request (any may be NULL). */
typedef struct psdbd_conditions {
    const char *if_match, *if_none_match, *if_modified_since, *if_unmodified_since, *if_range;
} psdbd_conditions;

/* What psdbd_blob_preconditions finds: go on, or the status RFC 9110 13.2.2 calls for (the
 * values are those statuses; blobs.c answers with the outcome of the same name). */
#define PSDBD_PRECONDITION_GO 0
#define PSDBD_PRECONDITION_NOT_MODIFIED 304
#define PSDBD_PRECONDITION_FAILED 412

/* Evaluates the preconditions of a GET or HEAD of the blob `sha`, last modified at
 * `last_modified`, at time `now`, in RFC 9110 13.2.2's order: If-Match (else If-Unmodified-Since),
 * then If-None-Match (else If-Modified-Since). Returns PSDBD_PRECONDITION_FAILED (412),
 * PSDBD_PRECONDITION_NOT_MODIFIED (304), or PSDBD_PRECONDITION_GO (0) to go on; *use_range says
 * whether a Range header may apply (If-Range absent or matching: the strong ETag, or exactly the
 * Last-Modified date). */
unsigned psdbd_blob_preconditions(const psdbd_conditions *h, const char *sha, int64_t last_modified,
                                  int64_t now, int *use_range);

#endif
