"""A SentencePiece model of the user's own (`vocab.model_path`), laid out as this pipeline needs it.

The pipeline needs pad = 0, eos = 1, unk = 2, then one `<2xx>` tag piece per language (the decoder's start
symbol). A model trained elsewhere usually has SentencePiece's defaults (unk 0, bos 1, eos 2, no pad) and no
tags. `Adopt` reorders the model's pieces into that layout — pad (added if the model has none), eos, unk, the
tags (those it lacks added as user-defined pieces), then every other piece in its order — and leaves each
piece's text, type and score as they were, so the model segments text exactly as before: only the ids
change (and the added tags, which match nothing but their own literal text). It is done in memory on every
load, from the user's file, whose sha256 the run records (params.txt `vocab.model_sha256`): a file changed
under a trained run is refused.

What cannot be adopted, one line each naming the file: a file that is not a SentencePiece model, and a model
without an end-of-sentence piece (a translation needs one to end).
"""
import hashlib
from typing import Callable, Dict, Sequence, Tuple

from sentencepiece import sentencepiece_model_pb2 as sp_model_pb2

from lingvo_gshard.data import report as report_lib
from lingvo_gshard.utils import files

_Piece = sp_model_pb2.ModelProto.SentencePiece


def Sha256(path: str) -> str:
  try:
    return hashlib.sha256(files.ReadBytes(path)).hexdigest()
  except OSError as e:
    raise report_lib.DataError(f'{path}: cannot read the SentencePiece model: {e.strerror or e}') from None


def _Parse(path: str, data: bytes) -> sp_model_pb2.ModelProto:
  proto = sp_model_pb2.ModelProto()
  try:
    proto.ParseFromString(data)
  except Exception:  # pylint: disable=broad-except  (protobuf's DecodeError and friends)
    proto = None
  if proto is None or not proto.pieces:
    raise report_lib.DataError(f'{path}: not a SentencePiece model ({len(data)} bytes that do not parse as '
                               'one); give the .model file SentencePiece wrote')
  return proto


def _Index(proto, spec_id: int, piece_name: str, kind) -> int:
  """Index of the special piece the trainer spec names (by id, else by its text and type), or -1."""
  pieces = proto.pieces
  if 0 <= spec_id < len(pieces) and pieces[spec_id].type == kind:
    return spec_id
  for i, piece in enumerate(pieces):
    if piece.piece == piece_name and piece.type == kind:
      return i
  return -1


def Adopt(path: str, tags: Sequence[str], log: Callable[[str], None] = lambda line: None
          ) -> Tuple[bytes, Dict]:
  """(model bytes in the pipeline's layout, what was done) for the SentencePiece model at `path` and the
  language tags `tags` ('en', 'de', ... : pieces <2en>, <2de>, ...) the run needs, in that order."""
  data = files.ReadBytes(path)
  proto = _Parse(path, data)
  spec = proto.trainer_spec
  control, unknown = _Piece.CONTROL, _Piece.UNKNOWN
  eos = _Index(proto, spec.eos_id, spec.eos_piece or '</s>', control)
  if eos < 0:
    raise report_lib.DataError(f'{path}: the model has no end-of-sentence piece (trained with --eos_id=-1); '
                               'retrain it with one (--eos_id, default 2): a translation needs it to end')
  unk = _Index(proto, spec.unk_id, spec.unk_piece or '<unk>', unknown)
  if unk < 0:
    raise report_lib.DataError(f'{path}: the model has no unknown piece; it is not a model SentencePiece wrote')
  pad = _Index(proto, spec.pad_id, spec.pad_piece or '<pad>', control)
  wanted = [f'<2{t}>' for t in tags]
  by_text = {piece.piece: i for i, piece in enumerate(proto.pieces)}
  clash = [w for w in wanted if w in by_text and proto.pieces[by_text[w]].type != _Piece.USER_DEFINED]
  if clash:
    raise report_lib.DataError(f'{path}: {clash[0]} is a piece of the model but not a user-defined one; the '
                               'language tags must be (--user_defined_symbols)')
  new = sp_model_pb2.ModelProto()
  new.CopyFrom(proto)
  del new.pieces[:]
  pad_piece = _Piece(piece=spec.pad_piece or '<pad>', score=0.0, type=control)
  new.pieces.extend([proto.pieces[pad] if pad >= 0 else pad_piece, proto.pieces[eos], proto.pieces[unk]])
  added = [w for w in wanted if w not in by_text]
  for w in wanted:
    new.pieces.append(proto.pieces[by_text[w]] if w in by_text else _Piece(piece=w, score=0.0,
                                                                             type=_Piece.USER_DEFINED))
  taken = {pad, eos, unk} | {by_text[w] for w in wanted if w in by_text}
  rest = [i for i in range(len(proto.pieces)) if i not in taken]
  # Other user-defined pieces go last: next to the tags they would be taken for tags (tokenizer.Vocabulary
  # counts the user-defined run after unk as the reserved ids a decoded sentence drops).
  rest.sort(key=lambda i: proto.pieces[i].type == _Piece.USER_DEFINED)
  new.pieces.extend(proto.pieces[i] for i in rest)
  bos = _Index(proto, spec.bos_id, spec.bos_piece or '<s>', control)
  spec = new.trainer_spec
  spec.pad_id, spec.eos_id, spec.unk_id = 0, 1, 2
  spec.bos_id = -1 if bos < 0 else [p.piece for p in new.pieces].index(proto.pieces[bos].piece)
  spec.pad_piece, spec.eos_piece, spec.unk_piece = (new.pieces[0].piece, new.pieces[1].piece,
                                                     new.pieces[2].piece)
  record = {'path': path, 'sha256': hashlib.sha256(data).hexdigest(), 'pieces': len(new.pieces),
            'pad_added': pad < 0, 'tags_added': len(added),
            'reordered': [pad, eos, unk] != [0, 1, 2] or any(by_text.get(w, -1) != 3 + i for i, w in enumerate(wanted))}
  if added or record['reordered']:
    log(f'{path}: adopted as the pipeline needs it (pad, eos, unk first, then the language tags'
        f'{f"; {len(added)} tags added" if added else ""}{"; a pad piece added" if pad < 0 else ""}): '
        f'{len(new.pieces)} pieces, segmentation unchanged')
  return new.SerializeToString(), record
