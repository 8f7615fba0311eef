"""Names on the draft link that both ends must spell the same way."""

from protos.mtp.v1 import draft_service_pb2 as pb

MTP_MODES = {"vanilla": pb.MTP_MODE_VANILLA, "eagle": pb.MTP_MODE_EAGLE}  # mode name -> wire enum
