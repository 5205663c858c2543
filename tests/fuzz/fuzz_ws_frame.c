/* libFuzzer target: WebSocket client frames as GET /ws reads them from the network
 * (src/serve/websocket.c). The bytes are read as a stream of frames, as the connection loop does:
 * a header is parsed, its payload unmasked, the next frame follows. A parsed header must be
 * consistent (its length within the cap, control frames short and unfragmented, the header no
 * longer than WS_HEADER_MAX) and the server's own header for that length must parse back the
 * same after masking. The bytes are also tried as a Sec-WebSocket-Key. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/websocket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = malloc(size ? size : 1);
	size_t at = 0;
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	while (at < size) {
		struct ws_frame f;
		struct ca_diag d = {{0}};
		int rc = ws_frame_parse(buf + at, size - at, &f, &d);
		if (rc <= 0)
			break;
		if (f.header_len > WS_HEADER_MAX || f.len > WS_MAX_MESSAGE ||
		    (f.opcode >= WS_OP_CLOSE && (f.len > 125 || !f.fin)))
			abort();
		if (size - at - f.header_len < f.len)
			break;
		ws_unmask(buf + at + f.header_len, (size_t)f.len, f.mask, 0);
		{ /* the server's header, masked as a client would, parses back the same */
			uint8_t h[WS_HEADER_MAX + 4];
			struct ws_frame g;
			size_t n = ws_frame_header(h, f.opcode, f.len);
			h[1] |= 0x80;
			memcpy(h + n, f.mask, 4);
			if (ws_frame_parse(h, n + 4, &g, &d) != 1 || g.len != f.len ||
			    g.opcode != f.opcode || !g.fin || g.header_len != n + 4)
				abort();
		}
		at += f.header_len + (size_t)f.len;
	}
	{
		char key[64], accept[WS_ACCEPT_CHARS + 1];
		struct ca_diag d = {{0}};
		size_t k = size < sizeof key - 1 ? size : sizeof key - 1;
		memcpy(key, data, k);
		key[k] = '\0';
		if (ws_accept_key(key, accept, &d) == 0 && strlen(accept) != WS_ACCEPT_CHARS)
			abort();
	}
	free(buf);
	return 0;
}
