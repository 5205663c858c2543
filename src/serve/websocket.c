/* websocket: RFC 6455 handshake key and frames (websocket.h). */
#include "serve/websocket.h"

#include <stdio.h>
#include <string.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

int ws_frame_parse(const uint8_t *buf, size_t n, struct ws_frame *f, struct ca_diag *d)
{
	size_t need = 2;
	uint64_t len;
	memset(f, 0, sizeof *f);
	if (n < 2)
		return 0;
	f->fin = (buf[0] & 0x80) != 0;
	f->opcode = buf[0] & 0x0F;
	if (buf[0] & 0x70)
		return ca_fail(d, CA_ERR_PARSE, "a frame with reserved bits set");
	if (f->opcode != WS_OP_CONT && f->opcode != WS_OP_TEXT && f->opcode != WS_OP_BINARY &&
	    f->opcode != WS_OP_CLOSE && f->opcode != WS_OP_PING && f->opcode != WS_OP_PONG)
		return ca_fail(d, CA_ERR_PARSE, "a frame with the unknown opcode %d", f->opcode);
	if (!(buf[1] & 0x80))
		return ca_fail(d, CA_ERR_PARSE, "an unmasked client frame");
	len = buf[1] & 0x7F;
	if (len == 126)
		need += 2;
	else if (len == 127)
		need += 8;
	need += 4; /* the mask */
	if (n < need)
		return 0;
	if (len == 126) {
		len = (uint64_t)buf[2] << 8 | buf[3];
		if (len < 126)
			return ca_fail(d, CA_ERR_PARSE, "a frame length not in its shortest form");
	} else if (len == 127) {
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | buf[2 + i];
		if (len >> 63)
			return ca_fail(d, CA_ERR_PARSE, "a frame length with its top bit set");
		if (len <= 0xFFFF)
			return ca_fail(d, CA_ERR_PARSE, "a frame length not in its shortest form");
	}
	if (f->opcode >= WS_OP_CLOSE && (len > 125 || !f->fin))
		return ca_fail(d, CA_ERR_PARSE, "a control frame longer than 125 bytes or "
						"fragmented");
	if (len > WS_MAX_MESSAGE)
		return ca_fail(d, CA_ERR_LIMIT, "a frame of %llu bytes (at most %u)",
			       (unsigned long long)len, WS_MAX_MESSAGE);
	memcpy(f->mask, buf + need - 4, 4);
	f->len = len;
	f->header_len = need;
	return 1;
}

void ws_unmask(uint8_t *p, size_t n, const uint8_t mask[4], uint64_t offset)
{
	for (size_t i = 0; i < n; i++)
		p[i] ^= mask[(offset + i) & 3];
}

size_t ws_frame_header(uint8_t hdr[WS_HEADER_MAX], int opcode, uint64_t len)
{
	hdr[0] = (uint8_t)(0x80 | (opcode & 0x0F));
	if (len < 126) {
		hdr[1] = (uint8_t)len;
		return 2;
	}
	if (len <= 0xFFFF) {
		hdr[1] = 126;
		hdr[2] = (uint8_t)(len >> 8);
		hdr[3] = (uint8_t)len;
		return 4;
	}
	hdr[1] = 127;
	for (int i = 0; i < 8; i++)
		hdr[2 + i] = (uint8_t)(len >> (56 - 8 * i));
	return 10;
}

int ws_accept_key(const char *client_key, char out[WS_ACCEPT_CHARS + 1], struct ca_diag *d)
{
	char text[64];
	unsigned char sha[20];
	gnutls_datum_t in = {sha, sizeof sha}, b64 = {NULL, 0};
	size_t k = client_key ? strlen(client_key) : 0;
	/* 16 bytes in base64: 22 characters and "==" */
	if (k != 24 || client_key[22] != '=' || client_key[23] != '=' ||
	    strspn(client_key, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") !=
		    22)
		return ca_fail(d, CA_ERR_INVALID, "Sec-WebSocket-Key must be the base64 of 16 bytes");
	snprintf(text, sizeof text, "%s%s", client_key, WS_GUID);
	if (gnutls_hash_fast(GNUTLS_DIG_SHA1, text, strlen(text), sha) != 0 ||
	    gnutls_base64_encode2(&in, &b64) != 0 || b64.size != WS_ACCEPT_CHARS) {
		if (b64.data)
			gnutls_free(b64.data);
		return ca_fail(d, CA_ERR_INVALID, "cannot compute Sec-WebSocket-Accept");
	}
	memcpy(out, b64.data, WS_ACCEPT_CHARS);
	out[WS_ACCEPT_CHARS] = '\0';
	gnutls_free(b64.data);
	return 0;
}
