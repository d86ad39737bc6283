/*
 * Test-only golden harness: runs Apache Kafka's own classes (from the broker's jars) so the
 * Python partitioner and serde can be compared with them. Compiled by the tests with javac.
 *
 * Modes (one command-line argument; input lines on stdin, one answer line per input line):
 *   partition                   "<topicIdBase64> <partition> <numMetadataPartitions>" -> metadata partition
 *   serialize                   a record spec (below)          -> hex of RemoteLogMetadataSerde.serialize
 *   deserialize                 hex of a serialized record     -> the record spec Kafka decodes
 *
 * Record specs (space separated; custom metadata as hex or "-" for none; epochs "e:o,e:o"):
 *   SEG  topicId topic partition segmentId start end maxTs brokerId eventTs size state custom txnEmpty epochs
 *   UPD  topicId topic partition segmentId eventTs brokerId state custom
 *   DEL  topicId topic partition state eventTs brokerId
 *   SNAP segmentId start end maxTs brokerId eventTs size state custom txnEmpty epochs
 */

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogMetadataTopicPartitioner;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogSegmentMetadataSnapshot;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteState;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

public final class RlmmGolden {
    private static final RemoteLogMetadataSerde SERDE = new RemoteLogMetadataSerde();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        String mode = args[0];
        Map<Integer, RemoteLogMetadataTopicPartitioner> partitioners = new TreeMap<>();
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            switch (mode) {
                case "partition": {
                    String[] f = line.split(" ");
                    TopicIdPartition tp = new TopicIdPartition(Uuid.fromString(f[0]), Integer.parseInt(f[1]), "t");
                    RemoteLogMetadataTopicPartitioner partitioner = partitioners.computeIfAbsent(
                        Integer.parseInt(f[2]), RemoteLogMetadataTopicPartitioner::new);
                    out.println(partitioner.metadataPartition(tp));
                    break;
                }
                case "serialize":
                    out.println(hex(SERDE.serialize(parse(line))));
                    break;
                case "deserialize":
                    out.println(spec(SERDE.deserialize(unhex(line))));
                    break;
                default:
                    throw new IllegalArgumentException("unknown mode " + mode);
            }
        }
        out.flush();
    }

    private static RemoteLogMetadata parse(String line) {
        String[] f = line.split(" ");
        switch (f[0]) {
            case "SEG": {
                TopicIdPartition tp = new TopicIdPartition(Uuid.fromString(f[1]), Integer.parseInt(f[3]), f[2]);
                return new RemoteLogSegmentMetadata(new RemoteLogSegmentId(tp, Uuid.fromString(f[4])),
                    Long.parseLong(f[5]), Long.parseLong(f[6]), Long.parseLong(f[7]), Integer.parseInt(f[8]),
                    Long.parseLong(f[9]), Integer.parseInt(f[10]), custom(f[12]),
                    RemoteLogSegmentState.forId(Byte.parseByte(f[11])), epochs(f[14]), f[13].equals("1"));
            }
            case "UPD": {
                TopicIdPartition tp = new TopicIdPartition(Uuid.fromString(f[1]), Integer.parseInt(f[3]), f[2]);
                return new RemoteLogSegmentMetadataUpdate(new RemoteLogSegmentId(tp, Uuid.fromString(f[4])),
                    Long.parseLong(f[5]), custom(f[8]), RemoteLogSegmentState.forId(Byte.parseByte(f[7])),
                    Integer.parseInt(f[6]));
            }
            case "DEL": {
                TopicIdPartition tp = new TopicIdPartition(Uuid.fromString(f[1]), Integer.parseInt(f[3]), f[2]);
                return new RemotePartitionDeleteMetadata(tp, RemotePartitionDeleteState.forId(Byte.parseByte(f[4])),
                    Long.parseLong(f[5]), Integer.parseInt(f[6]));
            }
            case "SNAP":
                return new RemoteLogSegmentMetadataSnapshot(Uuid.fromString(f[1]), Long.parseLong(f[2]),
                    Long.parseLong(f[3]), Long.parseLong(f[4]), Integer.parseInt(f[5]), Long.parseLong(f[6]),
                    Integer.parseInt(f[7]), custom(f[9]), RemoteLogSegmentState.forId(Byte.parseByte(f[8])),
                    epochs(f[11]), f[10].equals("1"));
            default:
                throw new IllegalArgumentException("unknown record spec " + f[0]);
        }
    }

    private static String spec(RemoteLogMetadata md) {
        if (md instanceof RemoteLogSegmentMetadata) {
            RemoteLogSegmentMetadata m = (RemoteLogSegmentMetadata) md;
            return String.join(" ", "SEG", tp(m.topicIdPartition()), m.remoteLogSegmentId().id().toString(),
                "" + m.startOffset(), "" + m.endOffset(), "" + m.maxTimestampMs(), "" + m.brokerId(),
                "" + m.eventTimestampMs(), "" + m.segmentSizeInBytes(), "" + m.state().id(),
                custom(m.customMetadata()), m.isTxnIdxEmpty() ? "1" : "0", epochs(m.segmentLeaderEpochs()));
        } else if (md instanceof RemoteLogSegmentMetadataUpdate) {
            RemoteLogSegmentMetadataUpdate m = (RemoteLogSegmentMetadataUpdate) md;
            return String.join(" ", "UPD", tp(m.topicIdPartition()), m.remoteLogSegmentId().id().toString(),
                "" + m.eventTimestampMs(), "" + m.brokerId(), "" + m.state().id(), custom(m.customMetadata()));
        } else if (md instanceof RemotePartitionDeleteMetadata) {
            RemotePartitionDeleteMetadata m = (RemotePartitionDeleteMetadata) md;
            return String.join(" ", "DEL", tp(m.topicIdPartition()), "" + m.state().id(),
                "" + m.eventTimestampMs(), "" + m.brokerId());
        } else {
            RemoteLogSegmentMetadataSnapshot m = (RemoteLogSegmentMetadataSnapshot) md;
            return String.join(" ", "SNAP", m.segmentId().toString(), "" + m.startOffset(), "" + m.endOffset(),
                "" + m.maxTimestampMs(), "" + m.brokerId(), "" + m.eventTimestampMs(), "" + m.segmentSizeInBytes(),
                "" + m.state().id(), custom(m.customMetadata()), m.isTxnIdxEmpty() ? "1" : "0",
                epochs(m.segmentLeaderEpochs()));
        }
    }

    private static String tp(TopicIdPartition tp) {
        return tp.topicId() + " " + tp.topic() + " " + tp.partition();
    }

    private static Optional<RemoteLogSegmentMetadata.CustomMetadata> custom(String s) {
        return s.equals("-") ? Optional.empty() : Optional.of(new RemoteLogSegmentMetadata.CustomMetadata(unhex(s)));
    }

    private static String custom(Optional<RemoteLogSegmentMetadata.CustomMetadata> c) {
        if (c.isEmpty()) {
            return "-";
        }
        byte[] v = c.get().value();
        return v.length == 0 ? "=" : hex(v);
    }

    private static Map<Integer, Long> epochs(String s) {
        TreeMap<Integer, Long> m = new TreeMap<>();
        for (String e : s.split(",")) {
            String[] kv = e.split(":");
            m.put(Integer.parseInt(kv[0]), Long.parseLong(kv[1]));
        }
        return m;
    }

    private static String epochs(Map<Integer, Long> m) {
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<Integer, Long> e : new TreeMap<>(m).entrySet()) {
            if (sb.length() > 0) {
                sb.append(',');
            }
            sb.append(e.getKey()).append(':').append(e.getValue());
        }
        return sb.toString();
    }

    private static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder(b.length * 2);
        for (byte x : b) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }

    private static byte[] unhex(String s) {
        if (s.equals("=")) {
            return new byte[0];
        }
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }
}
