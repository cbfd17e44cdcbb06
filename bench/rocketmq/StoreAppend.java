import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.FileInputStream;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.PutMessageStatus;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * RocketMQ 4.9.8's own store (DefaultMessageStore, its default geometry, async flush) appending
 * the messages of a file written by bench/rocketmq_store.py, from one writer thread, into a
 * fresh store directory. The messages are read into memory before the clock starts; the clock
 * stops once the store's dispatch (consume queues and index) has caught up with the last put.
 * The CPU time of the whole JVM over the same span (every thread: the store's, JIT, GC) is reported.
 *
 * Usage: StoreAppend MESSAGES_FILE STORE_DIR. Prints one line of JSON.
 */
public final class StoreAppend {
    private StoreAppend() {
    }

    private static String readText(DataInputStream in) throws IOException {
        byte[] b = new byte[in.readUnsignedShort()];
        in.readFully(b);
        return new String(b, StandardCharsets.UTF_8);
    }

    private static List<MessageExtBrokerInner> readMessages(String path, InetSocketAddress host) throws IOException {
        List<MessageExtBrokerInner> out = new ArrayList<>();
        try (DataInputStream in = new DataInputStream(new BufferedInputStream(new FileInputStream(path), 1 << 20))) {
            int count = in.readInt();
            for (int i = 0; i < count; i++) {
                MessageExtBrokerInner msg = new MessageExtBrokerInner();
                msg.setTopic(readText(in));
                msg.setQueueId(in.readInt());
                String tags = readText(in);
                String keys = readText(in);
                String uniqueKey = readText(in);
                byte[] body = new byte[in.readInt()];
                in.readFully(body);
                Map<String, String> props = new HashMap<>();
                props.put(MessageConst.PROPERTY_TAGS, tags);
                props.put(MessageConst.PROPERTY_KEYS, keys);
                props.put(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, uniqueKey);
                MessageAccessor.setProperties(msg, props);
                msg.setPropertiesString(MessageDecoder.messageProperties2String(props));
                msg.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(tags));
                msg.setBody(body);
                msg.setBornHost(host);
                msg.setStoreHost(host);
                out.add(msg);
            }
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        InetSocketAddress host = new InetSocketAddress("127.0.0.1", 10911);
        List<MessageExtBrokerInner> messages = readMessages(args[0], host);
        MessageStoreConfig config = new MessageStoreConfig();
        config.setStorePathRootDir(args[1]);
        config.setStorePathCommitLog(args[1] + "/commitlog");
        config.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        DefaultMessageStore store = new DefaultMessageStore(config, new BrokerStatsManager("DefaultCluster", true),
            (topic, queueId, logicOffset, tagsCode, storeTime, filterBitMap, properties) -> { }, new BrokerConfig());
        if (!store.load()) {
            throw new IllegalStateException("the store did not load");
        }
        store.start();
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long cpu0 = os.getProcessCpuTime();
        long t0 = System.nanoTime();
        for (MessageExtBrokerInner msg : messages) {
            msg.setBornTimestamp(System.currentTimeMillis());
            PutMessageResult result = store.putMessage(msg);
            if (result.getPutMessageStatus() != PutMessageStatus.PUT_OK) {
                throw new IllegalStateException("put failed: " + result.getPutMessageStatus());
            }
        }
        long t1 = System.nanoTime();
        while (store.dispatchBehindBytes() > 0) {
            Thread.sleep(0, 100_000);
        }
        long t2 = System.nanoTime();
        long cpu = os.getProcessCpuTime() - cpu0;
        long end = store.getMaxPhyOffset();
        double seconds = (t2 - t0) / 1e9;
        System.out.printf("{\"messages\": %d, \"put_s\": %.6f, \"dispatch_s\": %.6f, \"seconds\": %.6f, "
            + "\"msgs_per_s\": %.1f, \"bytes\": %d, \"cpu_s\": %.6f}%n", messages.size(), (t1 - t0) / 1e9,
            (t2 - t1) / 1e9, seconds, messages.size() / seconds, end, cpu / 1e9);
        System.out.flush();
        store.shutdown();
        System.exit(0);
    }
}
