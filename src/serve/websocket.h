/* websocket: the parts of RFC 6455 the service's /ws endpoint needs (serve/openenv_ws.c): the
 * opening handshake's accept key, and frames: a client frame's header parsed defensively (it
 * comes from the network), a payload unmasked, a server frame's header made.
 *
 * Refused client frames (CA_ERR_PARSE, the connection is then closed with 1002): reserved bits
 * set, an unknown opcode, a control frame longer than 125 bytes or fragmented, an unmasked frame
 * (clients must mask), a 64-bit length with its top bit set or a length over WS_MAX_MESSAGE, a
 * length not in its shortest form. Pure functions, no I/O. */
#ifndef CA_SERVE_WEBSOCKET_H
#define CA_SERVE_WEBSOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/diag.h"

#define WS_MAX_MESSAGE  (16u << 20) /* bytes of a message, all its fragments together */
#define WS_HEADER_MAX   14          /* bytes of a frame header, mask included */
#define WS_ACCEPT_CHARS 28          /* base64 of a SHA-1 */

enum ws_opcode {
	WS_OP_CONT = 0x0,
	WS_OP_TEXT = 0x1,
	WS_OP_BINARY = 0x2,
	WS_OP_CLOSE = 0x8,
	WS_OP_PING = 0x9,
	WS_OP_PONG = 0xA,
};

struct ws_frame {
	bool fin;
	int opcode;
	uint8_t mask[4];
	uint64_t len;      /* payload bytes */
	size_t header_len; /* bytes before the payload */
};

/* The frame header at buf (n bytes available): 1 with *f when the whole header is there, 0 when
 * more bytes are needed, CA_ERR_PARSE when it is refused (above). */
int ws_frame_parse(const uint8_t *buf, size_t n, struct ws_frame *f, struct ca_diag *d);
/* XORs n payload bytes with the mask, `offset` bytes into the payload. */
void ws_unmask(uint8_t *p, size_t n, const uint8_t mask[4], uint64_t offset);
/* A server frame's header (FIN set, not masked) for len payload bytes: its length (2-10). */
size_t ws_frame_header(uint8_t hdr[WS_HEADER_MAX], int opcode, uint64_t len);
/* Sec-WebSocket-Accept for a client's Sec-WebSocket-Key (which must be the base64 of 16
 * bytes): out holds WS_ACCEPT_CHARS characters and a NUL. CA_ERR_INVALID for a bad key. */
int ws_accept_key(const char *client_key, char out[WS_ACCEPT_CHARS + 1], struct ca_diag *d);

#endif
