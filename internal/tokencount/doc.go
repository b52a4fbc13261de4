// Package tokencount counts the tokens of a text under a tiktoken encoding,
// exactly as github.com/tiktoken-go/tokenizer's codec does, at a fraction of
// its cost for ASCII text.
//
// Why not the codec alone: its Count splits the text with a backtracking
// regexp (dlclark/regexp2) that allocates a match per piece, then runs
// byte-pair merges on each piece: about 20 µs and 250 allocations for a
// 200-byte prompt, counted twice per job in a pipeline with an instant
// upstream (the worker's estimate at ingest, the simulator's usage). No
// maintained Go tokenizer splits without such a regexp. For ASCII text this
// package splits with hand-written code that follows the encoding's split
// pattern alternative by alternative (o200kPiece, cl100kPiece), and counts
// each piece once per process: a piece's tokens do not depend on what
// surrounds it (the codec merges within pieces only), and prompts repeat
// their words. Any other text, and any piece not yet seen, is counted by
// the codec itself. The equality with the codec is the package's test,
// on generated text and as a fuzz target.
//
// In the split patterns (split.go) the first alternative that matches at
// the start of the rest of the text takes it. On ASCII text the classes
// are: letters A-Z (Lu) and a-z (Ll), no Lt, Lm, Lo or M; digits 0-9;
// space \t \n \v \f \r and ' '; every other byte is "other" (neither
// \s, \p{L} nor \p{N}), except DEL (0x7f): the codec's compiled negated
// classes leave it out, so no alternative matches at a DEL, which the
// split skips (it counts no token), though it is \S to the lookahead.
package tokencount
