/*
 * Test-only harness: drives Apache Kafka's own LocalTieredStorage (kafka-storage test jar) so that
 * tests can compare its directory layout and reads with the Python `local` plugin. Compiled with
 * javac against the broker's jars at test time.
 *
 * Usage: LocalTieredStorageGolden <copy|fetch|delete> <dir> <topic> <partition> <topicId> <segmentId>
 *            <startOffset> <endOffset> <segmentSize> [mode arguments]
 *   copy:   <log> <index> <timeindex> <txnindex or -> <snapshot> <leader-epoch-bytes file>
 *   fetch:  <out dir> <range start>   writes SEGMENT, RANGE and one file per IndexType, or
 *                                     <name>.missing when Kafka raises RemoteResourceNotFoundException
 */
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.LocalTieredStorage;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;

public class LocalTieredStorageGolden {
    interface Fetch { InputStream open() throws Exception; }

    public static void main(String[] a) throws Exception {
        String mode = a[0];
        TopicIdPartition tp = new TopicIdPartition(Uuid.fromString(a[4]), new TopicPartition(a[2], Integer.parseInt(a[3])));
        RemoteLogSegmentId id = new RemoteLogSegmentId(tp, Uuid.fromString(a[5]));
        long start = Long.parseLong(a[6]);
        RemoteLogSegmentMetadata md = new RemoteLogSegmentMetadata(id, start, Long.parseLong(a[7]), 0L, 0, 0L,
                Integer.parseInt(a[8]), Map.of(0, start));
        LocalTieredStorage lts = new LocalTieredStorage();
        Map<String, Object> cfg = new HashMap<>();
        cfg.put("dir", a[1]);
        cfg.put("broker.id", 0);
        cfg.put("delete.enable", "true");
        lts.configure(cfg);
        switch (mode) {
            case "copy":
                LogSegmentData data = new LogSegmentData(Paths.get(a[9]), Paths.get(a[10]), Paths.get(a[11]),
                        a[12].equals("-") ? Optional.empty() : Optional.of(Paths.get(a[12])), Paths.get(a[13]),
                        ByteBuffer.wrap(Files.readAllBytes(Paths.get(a[14]))));
                lts.copyLogSegmentData(md, data);
                break;
            case "fetch":
                Path out = Paths.get(a[9]);
                int rangeStart = Integer.parseInt(a[10]);
                save(out, "SEGMENT", () -> lts.fetchLogSegment(md, 0));
                save(out, "RANGE", () -> lts.fetchLogSegment(md, rangeStart));
                for (RemoteStorageManager.IndexType t : RemoteStorageManager.IndexType.values()) {
                    save(out, t.name(), () -> lts.fetchIndex(md, t));
                }
                break;
            case "delete":
                lts.deleteLogSegmentData(md);
                break;
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
        lts.close();
    }

    static void save(Path out, String name, Fetch fetch) throws Exception {
        try (InputStream in = fetch.open()) {
            Files.write(out.resolve(name), in.readAllBytes());
        } catch (RemoteResourceNotFoundException e) {
            Files.writeString(out.resolve(name + ".missing"), String.valueOf(e.getMessage()));
        }
    }
}
