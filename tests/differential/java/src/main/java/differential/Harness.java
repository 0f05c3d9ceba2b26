package differential;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.common.collect.Multimap;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.commons.lang3.mutable.MutableInt;
import org.apache.pulsar.broker.ServiceConfiguration;
import org.apache.pulsar.broker.loadbalance.LoadData;
import org.apache.pulsar.broker.loadbalance.LoadSheddingStrategy;
import org.apache.pulsar.broker.loadbalance.ModularLoadManagerStrategy;
import org.apache.pulsar.broker.loadbalance.extensions.BrokerRegistry;
import org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl;
import org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerWrapper;
import org.apache.pulsar.broker.loadbalance.extensions.LoadManagerContext;
import org.apache.pulsar.broker.loadbalance.extensions.channel.ServiceUnitState;
import org.apache.pulsar.broker.loadbalance.extensions.channel.ServiceUnitStateChannel;
import org.apache.pulsar.broker.loadbalance.extensions.channel.ServiceUnitStateData;
import org.apache.pulsar.broker.loadbalance.extensions.data.BrokerLoadData;
import org.apache.pulsar.broker.loadbalance.extensions.data.BrokerLookupData;
import org.apache.pulsar.broker.loadbalance.extensions.data.TopBundlesLoadData;
import org.apache.pulsar.broker.loadbalance.extensions.filter.AntiAffinityGroupPolicyFilter;
import org.apache.pulsar.broker.loadbalance.extensions.filter.BrokerFilter;
import org.apache.pulsar.broker.loadbalance.extensions.filter.BrokerIsolationPoliciesFilter;
import org.apache.pulsar.broker.loadbalance.extensions.filter.BrokerMaxTopicCountFilter;
import org.apache.pulsar.broker.loadbalance.extensions.models.SplitCounter;
import org.apache.pulsar.broker.loadbalance.extensions.models.SplitDecision;
import org.apache.pulsar.broker.loadbalance.extensions.models.UnloadCounter;
import org.apache.pulsar.broker.loadbalance.extensions.models.UnloadDecision;
import org.apache.pulsar.broker.loadbalance.extensions.policies.AntiAffinityGroupPolicyHelper;
import org.apache.pulsar.broker.loadbalance.extensions.policies.IsolationPoliciesHelper;
import org.apache.pulsar.broker.loadbalance.extensions.scheduler.TransferShedder;
import org.apache.pulsar.broker.loadbalance.extensions.store.LoadDataStore;
import org.apache.pulsar.broker.loadbalance.extensions.strategy.DefaultNamespaceBundleSplitStrategyImpl;
import org.apache.pulsar.broker.loadbalance.impl.BrokerLoadManagerClassFilter;
import org.apache.pulsar.broker.loadbalance.impl.BrokerVersionFilter;
import org.apache.pulsar.broker.loadbalance.impl.BundleSplitterTask;
import org.apache.pulsar.broker.loadbalance.impl.LoadManagerShared;
import org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl;
import org.apache.pulsar.broker.loadbalance.impl.RoundRobinBrokerSelector;
import org.apache.pulsar.broker.loadbalance.impl.SimpleResourceAllocationPolicies;
import org.apache.pulsar.broker.resources.PulsarResources;
import org.apache.pulsar.common.configuration.PulsarConfigurationLoader;
import org.apache.pulsar.common.naming.BundleSplitOption;
import org.apache.pulsar.common.naming.FlowOrQpsEquallyDivideBundleSplitAlgorithm;
import org.apache.pulsar.common.naming.FlowOrQpsEquallyDivideBundleSplitOption;
import org.apache.pulsar.common.naming.NamespaceBundle;
import org.apache.pulsar.common.naming.NamespaceBundleSplitAlgorithm;
import org.apache.pulsar.common.naming.NamespaceName;
import org.apache.pulsar.common.naming.RangeEquallyDivideBundleSplitAlgorithm;
import org.apache.pulsar.common.naming.SpecifiedPositionsBundleSplitAlgorithm;
import org.apache.pulsar.common.naming.TopicCountEquallyDivideBundleSplitAlgorithm;
import org.apache.pulsar.common.policies.data.FailureDomainImpl;
import org.apache.pulsar.common.policies.data.LocalPolicies;
import org.apache.pulsar.common.policies.data.NamespaceIsolationDataImpl;
import org.apache.pulsar.common.policies.data.ResourceQuota;
import org.apache.pulsar.common.policies.data.stats.TopicStatsImpl;
import org.apache.pulsar.common.util.ObjectMapperFactory;
import org.apache.pulsar.metadata.api.MetadataStoreConfig;
import org.apache.pulsar.metadata.api.coordination.LockManager;
import org.apache.pulsar.metadata.api.extended.MetadataStoreExtended;
import org.apache.pulsar.policies.data.loadbalancer.BrokerData;
import org.apache.pulsar.policies.data.loadbalancer.BundleData;
import org.apache.pulsar.policies.data.loadbalancer.LocalBrokerData;
import org.apache.pulsar.policies.data.loadbalancer.NamespaceBundleStats;
import org.apache.pulsar.policies.data.loadbalancer.TimeAverageBrokerData;

/**
 * Runs Pulsar's own load-balancing code on the differential test cases.
 *
 * <p>Usage: {@code Harness CASES.jsonl RESULTS.jsonl}. Each input line is one case (see
 * tests/differential/README.md); each output line is {@code {"id": ..., ...}} with Pulsar's answer, or
 * {@code {"id": ..., "error": "..."}} when Pulsar threw.
 */
public final class Harness {
    private static final ObjectMapper MAPPER = ObjectMapperFactory.create();
    private static final String STRATEGY_PACKAGE = "org.apache.pulsar.broker.loadbalance.impl.";

    private Harness() {
    }

    public static void main(String[] args) throws Exception {
        try (BufferedReader in = Files.newBufferedReader(Path.of(args[0]), StandardCharsets.UTF_8);
             BufferedWriter out = Files.newBufferedWriter(Path.of(args[1]), StandardCharsets.UTF_8)) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                JsonNode testCase = MAPPER.readTree(line);
                ObjectNode result = MAPPER.createObjectNode();
                result.put("id", testCase.path("id").asText());
                try {
                    switch (testCase.path("kind").asText()) {
                        case "shed" -> shed(testCase, result);
                        case "splitCandidates" -> splitCandidates(testCase, result);
                        case "splitPositions" -> splitPositions(testCase, result);
                        case "transfer" -> transfer(testCase, result);
                        case "extensibleSplit" -> extensibleSplit(testCase, result);
                        case "extensiblePlacement" -> extensiblePlacement(testCase, result);
                        case "extensibleFilters" -> extensibleFilters(testCase, result);
                        case "cycle" -> cycle(testCase, result);
                        case "placement" -> placement(testCase, result);
                        case "avgShedderSort" -> avgShedderSort(testCase, result);
                        default -> throw new IllegalArgumentException("unknown kind " + testCase.path("kind"));
                    }
                } catch (Exception | LinkageError e) { // a class missing from a mixed classpath fails one case
                    result.removeAll();
                    result.put("id", testCase.path("id").asText());
                    result.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
                }
                out.write(MAPPER.writeValueAsString(result));
                out.newLine();
            }
        }
        // Every answer is written: stop here, whatever threads a release's in-memory metadata store left running
        // (some releases' stores keep a worker thread after close()).
        System.exit(0);
    }

    // --- inputs -----------------------------------------------------------------------------------------------

    /** The config map (Pulsar key -> string) read the way broker.conf is read. */
    static ServiceConfiguration config(JsonNode settings) throws Exception {
        Properties properties = new Properties();
        settings.fields().forEachRemaining(e -> properties.setProperty(e.getKey(), e.getValue().asText()));
        return PulsarConfigurationLoader.create(properties, ServiceConfiguration.class);
    }

    /**
     * LoadData from the planner's JSON ({@code "loadDataFile"}: a path, or {@code "loadData"} inline): load reports
     * and bundle data deserialized by Pulsar's own object mapper, as the leader reads them from the metadata store.
     */
    static LoadData loadData(JsonNode testCase) throws Exception {
        JsonNode document = document(testCase);
        LoadData loadData = new LoadData();
        for (Map.Entry<String, JsonNode> e : iterable(document.path("brokers").fields())) {
            LocalBrokerData local = MAPPER.treeToValue(e.getValue(), LocalBrokerData.class);
            loadData.getBrokerData().put(e.getKey(), new BrokerData(local));
        }
        for (Map.Entry<String, JsonNode> e : iterable(document.path("bundleData").fields())) {
            loadData.getBundleData().put(e.getKey(), MAPPER.treeToValue(e.getValue(), BundleData.class));
        }
        for (Map.Entry<String, JsonNode> e : iterable(document.path("recentlyUnloadedBundles").fields())) {
            loadData.getRecentlyUnloadedBundles().put(e.getKey(), e.getValue().asLong());
        }
        return loadData;
    }

    static JsonNode document(JsonNode testCase) throws Exception {
        return testCase.has("loadDataFile")
                ? MAPPER.readTree(Path.of(testCase.path("loadDataFile").asText()).toFile())
                : testCase.path("loadData");
    }

    /** The brokers in the order the case's LoadData lists them: the order the leader's map is filled in. */
    static List<String> brokerOrder(JsonNode testCase) throws Exception {
        List<String> order = new ArrayList<>();
        document(testCase).path("brokers").fieldNames().forEachRemaining(order::add);
        return order;
    }

    // --- shedding ---------------------------------------------------------------------------------------------

    /**
     * For each strategy of the case ({@code "strategies": {"AvgShedder": runs, ...}}): {@code runs} consecutive
     * findBundlesForUnloading calls on one strategy instance, so hit counters and history carry over.
     */
    static void shed(JsonNode testCase, ObjectNode result) throws Exception {
        ServiceConfiguration conf = config(testCase.path("config"));
        LoadData loadData = loadData(testCase);
        ObjectNode results = result.putObject("strategies");
        for (Map.Entry<String, JsonNode> e : iterable(testCase.path("strategies").fields())) {
            ObjectNode strategyResult = results.putObject(e.getKey());
            try {
                LoadSheddingStrategy strategy = (LoadSheddingStrategy) Class.forName(STRATEGY_PACKAGE + e.getKey())
                        .getDeclaredConstructor().newInstance();
                shed(strategy, e.getValue().asInt(), loadData, brokerOrder(testCase), testCase.path("absentBrokers"),
                        conf, strategyResult.putArray("runs"));
            } catch (Exception error) {
                strategyResult.removeAll();
                strategyResult.put("error", error.getClass().getSimpleName() + ": " + error.getMessage());
            }
        }
    }

    /**
     * Each run sees the case's LoadData minus the brokers {@code "absentBrokers"[run]} lists (its map filled in the
     * case's broker order), and is preceded by
     * onActiveBrokersChange with the brokers present, as the leader's updateAll does before a shedding cycle.
     */
    static void shed(LoadSheddingStrategy strategy, int numRuns, LoadData all, List<String> brokerOrder,
                     JsonNode absentBrokers, ServiceConfiguration conf, ArrayNode runs) throws Exception {
        for (int run = 0; run < numRuns; run++) {
            LoadData loadData = new LoadData();
            Set<String> absent = new HashSet<>();
            absentBrokers.path(run).forEach(broker -> absent.add(broker.asText()));
            for (String broker : brokerOrder) { // put one by one, as the leader fills its map
                if (!absent.contains(broker)) {
                    loadData.getBrokerData().put(broker, all.getBrokerData().get(broker));
                }
            }
            loadData.getBundleData().putAll(all.getBundleData());
            loadData.getRecentlyUnloadedBundles().putAll(all.getRecentlyUnloadedBundles());
            strategy.onActiveBrokersChange(new HashSet<>(loadData.getBrokerData().keySet()));
            Multimap<String, String> selected = strategy.findBundlesForUnloading(loadData, conf);
            ObjectNode runResult = runs.addObject();
            ArrayNode unloads = runResult.putArray("unloads");
            for (Map.Entry<String, String> entry : selected.entries()) {
                ObjectNode unload = unloads.addObject();
                unload.put("broker", entry.getKey());
                unload.put("bundle", entry.getValue());
                if (isAvgShedder(strategy)) {
                    // The destination the shedding run planned, as the placement side reads it back.
                    BundleData bundleData = loadData.getBundleData().get(entry.getValue());
                    unload.put("destination", ((ModularLoadManagerStrategy) strategy).selectBroker(
                            loadData.getBrokerData().keySet(), bundleData, loadData, conf).orElse(null));
                } else {
                    unload.putNull("destination");
                }
            }
            runResult.set("state", state(strategy));
        }
    }

    /**
     * AvgShedder, by name: releases before 3.0.6 (and 3.1.x, 3.2.0 to 3.2.3) do not have the class, and the harness
     * runs on them too. It is also its own placement strategy, through the interface every release has.
     */
    private static boolean isAvgShedder(LoadSheddingStrategy strategy) {
        return strategy.getClass().getSimpleName().equals("AvgShedder");
    }

    /** The strategy's private state after a run, in the planner's state-file shape (zero counters dropped). */
    static ObjectNode state(LoadSheddingStrategy strategy) throws Exception {
        ObjectNode state = MAPPER.createObjectNode();
        if (isAvgShedder(strategy)) {
            for (String[] names : new String[][]{{"brokerHitCountForHigh", "highHitCount"},
                    {"brokerHitCountForLow", "lowHitCount"}}) {
                ObjectNode counters = state.putObject(names[1]);
                Map<String, MutableInt> map = privateField(strategy, names[0]);
                new TreeMap<>(map).forEach((broker, count) -> {
                    if (count.intValue() != 0) {
                        counters.put(broker, count.intValue());
                    }
                });
            }
        } else if (strategy.getClass().getSimpleName().equals("ThresholdShedder")) {
            ObjectNode history = state.putObject("brokerAvgResourceUsage");
            Map<String, Double> map = privateField(strategy, "brokerAvgResourceUsage");
            new TreeMap<>(map).forEach(history::put);
        }
        return state;
    }

    // --- the extensible load manager -----------------------------------------------------------------------------

    /**
     * TransferShedder.findBundlesForUnloading {@code "runs"} times on one instance (its hit counter carries over), on
     * the case's {@code "extensibleLoadData"} (the planner's ExtensibleLoadData JSON) with the same mutable map of
     * recently unloaded brokers, as the leader's UnloadScheduler calls it. Without {@code "policies"}: built with its
     * test constructor, no PulsarService, so no ownership channel and no broker filters (the planner without the
     * cluster's policies read). With them: built as ExtensibleLoadManagerImpl builds it, on a PulsarService whose
     * metadata store holds the policies ({@link #writePolicies}), an ownership channel listing {@code "owners"}, the
     * broker filter pipeline and policy helpers ({@link ExtensibleFilters}) and the available brokers' lookup data
     * ({@code "lookupData"}): its isTransferable then checks every bundle it would move. The shedder reads the clock
     * itself: the case's times are relative to its {@code "now"} and are shifted to this JVM's clock.
     */
    static void transfer(JsonNode testCase, ObjectNode result) throws Exception {
        ServiceConfiguration conf = config(testCase.path("config"));
        JsonNode data = testCase.path("extensibleLoadData");
        long shift = System.currentTimeMillis() - testCase.path("now").asLong();
        Map<String, BrokerLoadData> brokers = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : iterable(data.path("brokers").fields())) {
            ObjectNode node = e.getValue().deepCopy();
            node.put("updatedAt", node.path("updatedAt").asLong() + shift);
            brokers.put(e.getKey(), MAPPER.treeToValue(node, BrokerLoadData.class));
        }
        Map<String, TopBundlesLoadData> topBundles = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : iterable(data.path("topBundles").fields())) {
            TopBundlesLoadData top = new TopBundlesLoadData();
            for (JsonNode bundle : e.getValue().path("topBundlesLoadData")) {
                top.getTopBundlesLoadData().add(new TopBundlesLoadData.BundleLoadData(
                        bundle.path("bundleName").asText(),
                        MAPPER.treeToValue(bundle.path("stats"), NamespaceBundleStats.class)));
            }
            topBundles.put(e.getKey(), top);
        }
        Map<String, BrokerLookupData> available = new LinkedHashMap<>();
        JsonNode availableBrokers = data.path("availableBrokers");
        if (availableBrokers.isArray()) {
            availableBrokers.forEach(broker -> available.put(broker.asText(), null));
        } else {
            brokers.keySet().forEach(broker -> available.put(broker, null));
        }
        for (String broker : available.keySet()) { // what the broker filters read, in the cases with policies
            JsonNode lookup = testCase.path("lookupData").path(broker);
            available.put(broker, lookup.isMissingNode() ? null : MAPPER.treeToValue(lookup, BrokerLookupData.class));
        }
        Map<String, Long> recentBundles = new HashMap<>();
        data.path("recentlyUnloadedBundles").fields().forEachRemaining(e -> recentBundles.put(e.getKey(),
                e.getValue().asLong()));
        Map<String, Long> recentBrokers = new HashMap<>();
        data.path("recentlyUnloadedBrokers").fields().forEachRemaining(e -> recentBrokers.put(e.getKey(),
                e.getValue().asLong() + shift));

        BrokerRegistry registry = proxy(BrokerRegistry.class, (method, args) ->
                method.getName().equals("getAvailableBrokerLookupDataAsync")
                        ? CompletableFuture.completedFuture(available) : null);
        LoadDataStore<?> brokerStore = store(brokers);
        LoadDataStore<?> topBundleStore = store(topBundles);
        LoadManagerContext context = proxy(LoadManagerContext.class, (method, args) -> switch (method.getName()) {
            case "brokerConfiguration" -> conf;
            case "brokerLoadDataStore" -> brokerStore;
            case "topBundleLoadDataStore" -> topBundleStore;
            case "brokerRegistry" -> registry;
            default -> null;
        });
        UnloadCounter counter = new UnloadCounter();
        if (testCase.has("policies")) {
            try (MetadataStoreExtended store = MetadataStoreExtended.create("memory:local",
                    MetadataStoreConfig.builder().build())) {
                conf.setClusterName(CLUSTER);
                PulsarResources resources = pulsarResources(store);
                writePolicies(testCase.path("policies"), resources);
                ServiceUnitStateChannel channel = ownershipChannel(testCase.path("owners"));
                ExtensibleLoadManagerImpl loadManager = StubServices.allocate(ExtensibleLoadManagerImpl.class);
                StubServices.setField(ExtensibleLoadManagerImpl.class, loadManager, "serviceUnitStateChannel",
                        channel);
                var pulsar = StubServices.broker(conf, StubServices.namespaces(Map.of(), List.of()), Map.of(),
                        new ExtensibleLoadManagerWrapper(loadManager));
                StubServices.leader(pulsar, resources, null);
                ExtensibleFilters filters = new ExtensibleFilters(pulsar, channel);
                transferRuns(testCase, new TransferShedder(pulsar, counter, filters.pipeline, filters.isolation,
                        filters.antiAffinity), counter, context, recentBundles, recentBrokers, shift, result);
            }
        } else {
            transferRuns(testCase, new TransferShedder(counter), counter, context, recentBundles, recentBrokers, shift,
                    result);
        }
    }

    /**
     * TransferShedder.findBundlesForUnloading {@code "runs"} times on one instance; per run its decisions, the skip
     * reason, the hit counter, the recently unloaded brokers and the load statistics.
     */
    private static void transferRuns(JsonNode testCase, TransferShedder shedder, UnloadCounter counter,
                                     LoadManagerContext context, Map<String, Long> recentBundles,
                                     Map<String, Long> recentBrokers, long shift, ObjectNode result)
            throws Exception {
        ArrayNode runs = result.putArray("runs");
        for (int run = 0; run < testCase.path("runs").asInt(1); run++) {
            Map<UnloadDecision.Reason, Long> skipsBefore = skips(counter);
            Set<UnloadDecision> decisions = shedder.findBundlesForUnloading(context, recentBundles, recentBrokers);
            ObjectNode runResult = runs.addObject();
            ArrayNode unloads = runResult.putArray("unloads");
            for (UnloadDecision decision : decisions) {
                ObjectNode unload = unloads.addObject();
                unload.put("broker", decision.getUnload().sourceBroker());
                unload.put("bundle", decision.getUnload().serviceUnit());
                unload.put("destination", decision.getUnload().destBroker().orElse(null));
                unload.put("reason", decision.getReason().name());
            }
            skips(counter).forEach((reason, count) -> {
                if (count > skipsBefore.get(reason)) {
                    runResult.put("skipped", reason.name());
                }
            });
            runResult.put("hitCount", (int) privateField(shedder, "unloadConditionHitCount"));
            ObjectNode brokersLeft = runResult.putObject("recentlyUnloadedBrokers");
            new TreeMap<>(recentBrokers).forEach((broker, at) -> brokersLeft.put(broker, at - shift));
            runResult.put("average", counter.getLoadAvg());
            runResult.put("std", counter.getLoadStd());
        }
    }

    /**
     * The extensible load manager's split strategy ({@code DefaultNamespaceBundleSplitStrategyImpl}), as one broker
     * runs it each cycle: one instance (its split-condition hit counts carry over) over {@code "runs"}, each the
     * broker's bundle stats that cycle, in name order. The broker owns every bundle it reports and no bundle is in
     * the Splitting state (the two ownership-channel checks); namespaces' bundle counts come from the case.
     */
    static void extensibleSplit(JsonNode testCase, ObjectNode result) throws Exception {
        ServiceConfiguration conf = config(testCase.path("config"));
        Map<String, Integer> counts = new TreeMap<>();
        testCase.path("namespaceBundleCounts").fields()
                .forEachRemaining(e -> counts.put(e.getKey(), e.getValue().asInt()));
        ServiceUnitStateChannel channel = proxy(ServiceUnitStateChannel.class, (method, args) ->
                switch (method.getName()) {
                    case "getOwnershipEntrySet" -> Set.of();
                    case "isOwner" -> true;
                    default -> throw new UnsupportedOperationException(method.getName());
                });
        ExtensibleLoadManagerImpl loadManager = StubServices.allocate(ExtensibleLoadManagerImpl.class);
        StubServices.setField(ExtensibleLoadManagerImpl.class, loadManager, "serviceUnitStateChannel", channel);
        BrokerRegistry registry = proxy(BrokerRegistry.class, (method, args) ->
                method.getName().equals("getBrokerId") ? "broker" : null);
        LoadManagerContext context = proxy(LoadManagerContext.class, (method, args) ->
                method.getName().equals("brokerRegistry") ? registry : null);
        Map<String, NamespaceBundleStats> bundleStats = new TreeMap<>();
        var pulsar = StubServices.broker(conf, StubServices.namespaces(counts, List.of()), bundleStats,
                new ExtensibleLoadManagerWrapper(loadManager));
        DefaultNamespaceBundleSplitStrategyImpl strategy = new DefaultNamespaceBundleSplitStrategyImpl(
                new SplitCounter());
        ArrayNode runs = result.putArray("runs");
        for (JsonNode stats : testCase.path("runs")) {
            bundleStats.clear();
            for (Map.Entry<String, JsonNode> e : iterable(stats.fields())) {
                bundleStats.put(e.getKey(), MAPPER.treeToValue(e.getValue(), NamespaceBundleStats.class));
            }
            ObjectNode runResult = runs.addObject();
            ArrayNode splits = runResult.putArray("splits");
            for (SplitDecision decision : strategy.findBundlesToSplit(context, pulsar)) {
                ObjectNode split = splits.addObject();
                split.put("bundle", decision.getSplit().serviceUnit());
                split.put("reason", decision.getReason().name());
            }
            ObjectNode hits = runResult.putObject("hitCounts");
            Map<String, Integer> hitCounts = privateField(strategy, "splitConditionHitCounts");
            new TreeMap<>(hitCounts).forEach(hits::put);
        }
    }

    /**
     * The extensible load manager's placement ({@code extensions.strategy.LeastResourceUsageWithWeight}) on the
     * case's {@code "candidates"} (in that order) and brokers' load data: the best brokers it picks among (read back
     * from its thread-local list) and the one it picked at random.
     */
    static void extensiblePlacement(JsonNode testCase, ObjectNode result) throws Exception {
        ServiceConfiguration conf = config(testCase.path("config"));
        Map<String, BrokerLoadData> brokers = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : iterable(testCase.path("brokers").fields())) {
            brokers.put(e.getKey(), MAPPER.treeToValue(e.getValue(), BrokerLoadData.class));
        }
        Set<String> candidates = new LinkedHashSet<>();
        testCase.path("candidates").forEach(broker -> candidates.add(broker.asText()));
        LoadDataStore<?> store = store(brokers);
        LoadManagerContext context = proxy(LoadManagerContext.class, (method, args) -> switch (method.getName()) {
            case "brokerConfiguration" -> conf;
            case "brokerLoadDataStore" -> store;
            default -> null;
        });
        var strategy = new org.apache.pulsar.broker.loadbalance.extensions.strategy.LeastResourceUsageWithWeight();
        Optional<String> chosen = strategy.select(candidates, StubServices.bundle("t0/ns0", "0x00000000_0xffffffff"),
                context);
        result.put("chosen", chosen.orElse(null));
        ArrayNode best = result.putArray("best");
        if (chosen.isPresent()) {
            ThreadLocal<List<String>> bestBrokers = privateField(strategy, "bestBrokers");
            bestBrokers.get().forEach(best::add);
        }
    }

    /**
     * The extensible load manager's broker filters for a lookup of the case's {@code "bundle"}, as
     * ExtensibleLoadManagerImpl.selectAsync runs them: its pipeline (BrokerLoadManagerClassFilter,
     * BrokerMaxTopicCountFilter, BrokerVersionFilter, AntiAffinityGroupPolicyFilter, BrokerIsolationPoliciesFilter),
     * each filter given the same map of the available brokers' lookup data ({@code "brokers"}, in that order), a
     * filter that fails leaving the others' result. The broker load data ({@code "brokerLoadData"}) answers the topic
     * counts; the ownership channel lists {@code "owners"} (bundle -> broker) as Owned; the case's
     * {@code "policies"} are in the metadata store ({@link #writePolicies}) and the anti-affinity helper's failure
     * domains are read from it, as listenFailureDomainUpdate() does. The pipeline runs twice and the second answer
     * counts: on a running broker the metadata caches are warm and every filter completes in pipeline order; on a
     * cold cache the isolation and anti-affinity filters complete in whatever order their reads do.
     */
    static void extensibleFilters(JsonNode testCase, ObjectNode result) throws Exception {
        ServiceConfiguration conf = config(testCase.path("config"));
        conf.setClusterName(CLUSTER);
        Map<String, BrokerLookupData> available = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : iterable(testCase.path("brokers").fields())) {
            available.put(e.getKey(), MAPPER.treeToValue(e.getValue(), BrokerLookupData.class));
        }
        Map<String, BrokerLoadData> loads = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : iterable(testCase.path("brokerLoadData").fields())) {
            loads.put(e.getKey(), MAPPER.treeToValue(e.getValue(), BrokerLoadData.class));
        }
        ServiceUnitStateChannel channel = ownershipChannel(testCase.path("owners"));
        LoadDataStore<?> loadStore = store(loads);
        LoadManagerContext context = proxy(LoadManagerContext.class, (method, args) -> switch (method.getName()) {
            case "brokerConfiguration" -> conf;
            case "brokerLoadDataStore" -> loadStore;
            default -> throw new UnsupportedOperationException(method.getName());
        });
        String name = testCase.path("bundle").asText();
        NamespaceBundle bundle = StubServices.bundle(LoadManagerShared.getNamespaceNameFromBundleName(name),
                LoadManagerShared.getBundleRangeFromBundleName(name));
        try (MetadataStoreExtended store = MetadataStoreExtended.create("memory:local",
                MetadataStoreConfig.builder().build())) {
            PulsarResources resources = pulsarResources(store);
            writePolicies(testCase.path("policies"), resources);
            StubServices.Pulsar pulsar = StubServices.broker(conf, StubServices.namespaces(Map.of(), List.of()),
                    Map.of(), null);
            StubServices.leader(pulsar, resources, null);
            List<BrokerFilter> pipeline = new ExtensibleFilters(pulsar, channel).pipeline;
            Map<String, BrokerLookupData> candidates = null;
            List<String> failed = new ArrayList<>();
            for (int pass = 0; pass < 2; pass++) {
                candidates = new ConcurrentHashMap<>(available);
                failed.clear();
                for (BrokerFilter filter : pipeline) {
                    try {
                        filter.filterAsync(candidates, bundle, context).get(30, TimeUnit.SECONDS);
                    } catch (ExecutionException e) {
                        failed.add(filter.name());
                    }
                }
            }
            ArrayNode kept = result.putArray("candidates");
            new TreeMap<>(candidates).keySet().forEach(kept::add);
            ArrayNode failures = result.putArray("failed");
            failed.forEach(failures::add);
        }
    }

    /**
     * The extensible load manager's broker filter pipeline and policy helpers, as ExtensibleLoadManagerImpl builds
     * them at start: the anti-affinity helper reads the ownership channel and the failure domains (read once here,
     * as its listenFailureDomainUpdate() does), the isolation helper reads the isolation policies through a
     * SimpleResourceAllocationPolicies.
     */
    static final class ExtensibleFilters {
        final AntiAffinityGroupPolicyHelper antiAffinity;
        final IsolationPoliciesHelper isolation;
        final List<BrokerFilter> pipeline;

        ExtensibleFilters(StubServices.Pulsar pulsar, ServiceUnitStateChannel channel) throws Exception {
            antiAffinity = new AntiAffinityGroupPolicyHelper(pulsar, channel);
            LoadManagerShared.refreshBrokerToFailureDomainMap(pulsar,
                    privateField(antiAffinity, "brokerToFailureDomainMap"));
            isolation = new IsolationPoliciesHelper(new SimpleResourceAllocationPolicies(pulsar));
            pipeline = List.of(
                    new org.apache.pulsar.broker.loadbalance.extensions.filter.BrokerLoadManagerClassFilter(),
                    new BrokerMaxTopicCountFilter(),
                    new org.apache.pulsar.broker.loadbalance.extensions.filter.BrokerVersionFilter(),
                    new AntiAffinityGroupPolicyFilter(antiAffinity),
                    new BrokerIsolationPoliciesFilter(isolation));
        }
    }

    /** An ownership channel listing {@code owners} (bundle -> broker) as Owned, and answering isOwner from them. */
    static ServiceUnitStateChannel ownershipChannel(JsonNode owners) {
        Map<String, ServiceUnitStateData> owned = new LinkedHashMap<>();
        owners.fields().forEachRemaining(e -> owned.put(e.getKey(),
                new ServiceUnitStateData(ServiceUnitState.Owned, e.getValue().asText(), 1)));
        return proxy(ServiceUnitStateChannel.class, (method, args) -> switch (method.getName()) {
            case "getOwnershipEntrySet" -> owned.entrySet();
            case "isOwner" -> args.length == 2 && owned.containsKey((String) args[0])
                    && owned.get((String) args[0]).dstBroker().equals(args[1]);
            default -> throw new UnsupportedOperationException(method.getName());
        });
    }

    private static Map<UnloadDecision.Reason, Long> skips(UnloadCounter counter) {
        Map<UnloadDecision.Reason, Long> counts = new TreeMap<>();
        counter.getBreakdownCounters().get(UnloadDecision.Label.Skip).forEach((reason, count) ->
                counts.put(reason, count.get()));
        return counts;
    }

    /** A load data store over a map (its entrySet order is the map's): only get and entrySet are called. */
    private static LoadDataStore<?> store(Map<String, ?> map) {
        return proxy(LoadDataStore.class, (method, args) -> switch (method.getName()) {
            case "get" -> Optional.ofNullable(map.get((String) args[0]));
            case "entrySet" -> map.entrySet();
            case "size" -> map.size();
            default -> throw new UnsupportedOperationException(method.getName());
        });
    }

    private interface Answer {
        Object answer(Method method, Object[] args) throws Throwable;
    }

    private static <T> T proxy(Class<T> type, Answer answer) {
        return type.cast(Proxy.newProxyInstance(type.getClassLoader(), new Class<?>[]{type},
                (target, method, args) -> method.getDeclaringClass() == Object.class
                        ? method.invoke(answer, args) : answer.answer(method, args)));
    }

    // --- splitting --------------------------------------------------------------------------------------------

    /** BundleSplitterTask.findBundlesToSplit with the namespaces' bundle counts given by the case. */
    static void splitCandidates(JsonNode testCase, ObjectNode result) throws Exception {
        ServiceConfiguration conf = config(testCase.path("config"));
        LoadData loadData = loadData(testCase);
        Map<String, Integer> counts = new TreeMap<>();
        testCase.path("namespaceBundleCounts").fields()
                .forEachRemaining(e -> counts.put(e.getKey(), e.getValue().asInt()));
        StubServices.Namespaces namespaces = StubServices.namespaces(counts, List.of());
        Map<String, String> split = new BundleSplitterTask()
                .findBundlesToSplit(loadData, StubServices.pulsar(conf, namespaces));
        ObjectNode bundles = result.putObject("bundles");
        new TreeMap<>(split).forEach(bundles::put);
    }

    /** One split algorithm's getSplitBoundary on one bundle, with the namespace's topics given by the case. */
    static void splitPositions(JsonNode testCase, ObjectNode result) throws Exception {
        ServiceConfiguration conf = config(testCase.path("config"));
        List<String> topicNames = new ArrayList<>();
        Map<String, TopicStatsImpl> topicStats = new TreeMap<>();
        for (JsonNode topic : testCase.path("topics")) {
            String name = topic.path("name").asText();
            topicNames.add(name);
            TopicStatsImpl stats = new TopicStatsImpl();
            stats.msgRateIn = topic.path("msgRateIn").asDouble();
            stats.msgRateOut = topic.path("msgRateOut").asDouble();
            stats.msgThroughputIn = topic.path("msgThroughputIn").asDouble();
            stats.msgThroughputOut = topic.path("msgThroughputOut").asDouble();
            topicStats.put(name, stats);
        }
        StubServices.Namespaces namespaces = StubServices.namespaces(Map.of(), topicNames);
        NamespaceBundle bundle = StubServices.bundle(testCase.path("namespace").asText(),
                testCase.path("bundle").asText());
        List<Long> positions = null;
        if (testCase.path("positions").isArray()) {
            positions = new ArrayList<>();
            for (JsonNode position : testCase.path("positions")) {
                positions.add(position.asLong());
            }
        }
        NamespaceBundleSplitAlgorithm algorithm;
        BundleSplitOption option = new BundleSplitOption(namespaces, bundle, positions);
        switch (testCase.path("algorithm").asText()) {
            case "range_equally_divide" -> algorithm = new RangeEquallyDivideBundleSplitAlgorithm();
            case "topic_count_equally_divide" -> algorithm = new TopicCountEquallyDivideBundleSplitAlgorithm();
            case "specified_positions_divide" ->
                    algorithm = new SpecifiedPositionsBundleSplitAlgorithm(testCase.path("force").asBoolean());
            case "flow_or_qps_equally_divide" -> {
                algorithm = new FlowOrQpsEquallyDivideBundleSplitAlgorithm();
                option = new FlowOrQpsEquallyDivideBundleSplitOption(namespaces, bundle, positions, topicStats,
                        conf.getLoadBalancerNamespaceBundleMaxMsgRate(),
                        conf.getLoadBalancerNamespaceBundleMaxBandwidthMbytes(),
                        conf.getFlowOrQpsDifferenceThresholdPercentage());
            }
            default -> throw new IllegalArgumentException("unknown algorithm " + testCase.path("algorithm"));
        }
        List<Long> boundaries = algorithm.getSplitBoundary(option).get();
        if (boundaries == null) {
            result.putNull("positions");
        } else {
            ArrayNode array = result.putArray("positions");
            boundaries.forEach(array::add);
        }
    }


    /**
     * AvgShedder's private calculateScoresAndSort on the case's LoadData: the scores, the order its HashMap hands them
     * to the sort ({@code "arrival"}), and the sorted broker list.
     */
    @SuppressWarnings("unchecked")
    static void avgShedderSort(JsonNode testCase, ObjectNode result) throws Exception {
        ServiceConfiguration conf = config(testCase.path("config"));
        LoadData loadData = loadData(testCase);
        Object strategy = Class.forName(STRATEGY_PACKAGE + "AvgShedder").getDeclaredConstructor().newInstance();
        Method sort = strategy.getClass().getDeclaredMethod("calculateScoresAndSort", LoadData.class,
                ServiceConfiguration.class);
        sort.setAccessible(true);
        List<String> sorted = (List<String>) sort.invoke(strategy, loadData, conf);
        Map<String, Double> scores = privateField(strategy, "brokerScoreMap");
        ArrayNode arrival = result.putArray("arrival");
        ObjectNode scoreNode = result.putObject("scores");
        scores.forEach((broker, score) -> {
            arrival.add(broker);
            scoreNode.put(broker, score);
        });
        ArrayNode sortedNode = result.putArray("sorted");
        sorted.forEach(sortedNode::add);
    }

    // --- the modular load manager: its shedding cycle and its placement -------------------------------------------

    /** The cluster name the cases' policies are written under (generator.CLUSTER). */
    private static final String CLUSTER = "dc1";

    /**
     * ModularLoadManagerImpl.doLoadShedding {@code "runs"} times on the case's LoadData, as the leader runs it each
     * minute: the grace-period cleanup of recently unloaded bundles, the shedding strategy, the excluded namespaces,
     * the namespace-policy and anti-affinity checks, and every unload's destination through the private selectBroker
     * (namespace policies, the topic-count, anti-affinity and even-distribution filters, the broker filters, the
     * placement strategy and its overload re-pick). Between runs the strategies hear onActiveBrokersChange, as from
     * the leader's updateAll; the LoadData does not change (nothing moves), except for the recently unloaded bundles.
     *
     * <p>The manager is built by {@link #modular}. The admin client records the unload calls.
     */
    static void cycle(JsonNode testCase, ObjectNode result) throws Exception {
        List<String[]> unloadCalls = new ArrayList<>();
        try (Modular modular = modular(testCase, unloadCalls)) {
            ArrayNode runs = result.putArray("runs");
            for (int run = 0; run < testCase.path("runs").asInt(); run++) {
                modular.shedding.onActiveBrokersChange(new HashSet<>(modular.brokers));
                modular.placement.onActiveBrokersChange(new HashSet<>(modular.brokers));
                unloadCalls.clear();
                modular.tieBreak.ties.clear();
                modular.tieBreak.redraws = 0;
                modular.selected.clear();
                modular.manager.doLoadShedding();
                ObjectNode runResult = runs.addObject();
                ArrayNode unloads = runResult.putArray("unloads");
                for (String[] call : unloadCalls) {
                    ObjectNode unload = unloads.addObject();
                    unload.put("bundle", call[0] + "/" + call[1]);
                    unload.put("destination", call[2]);
                }
                runResult.put("ties", modular.tieBreak.ties.size());
                runResult.put("redraws", modular.tieBreak.redraws);
                runResult.put("selected", modular.selected.stream().mapToInt(Integer::intValue).sum());
                runResult.set("state", state(modular.shedding));
            }
        }
    }

    /**
     * A client's lookups of the case's {@code "bundles"}, in order, through ModularLoadManagerImpl's
     * selectBrokerForAssignment: each pick is preallocated (its bundle data counts on the chosen broker, its range in
     * the broker's namespace ranges), so the next lookup sees it. Bundles without bundle data get Pulsar's default
     * (the metadata store has none). Answer: per bundle, the broker chosen (null: none).
     */
    static void placement(JsonNode testCase, ObjectNode result) throws Exception {
        try (Modular modular = modular(testCase, new ArrayList<>())) {
            modular.placement.onActiveBrokersChange(new HashSet<>(modular.brokers));
            ArrayNode placements = result.putArray("placements");
            for (JsonNode bundle : testCase.path("bundles")) {
                NamespaceBundle serviceUnit = LoadManagerShared.getNamespaceBundle(modular.pulsar, bundle.asText());
                ObjectNode placement = placements.addObject();
                placement.put("bundle", bundle.asText());
                placement.put("broker", modular.manager.selectBrokerForAssignment(serviceUnit).orElse(null));
            }
            result.put("ties", modular.tieBreak.ties.size());
        }
    }

    /** A ModularLoadManagerImpl set up for one case, and what the harness reads back from it. */
    static final class Modular implements AutoCloseable {
        ModularLoadManagerImpl manager;
        MetadataStoreExtended store;
        StubServices.Pulsar pulsar;
        List<String> brokers;
        LoadSheddingStrategy shedding;
        ModularLoadManagerStrategy placement;
        TieBreak tieBreak;
        final List<Integer> selected = new ArrayList<>();

        @Override
        public void close() throws Exception {
            store.close();
        }
    }

    /**
     * A ModularLoadManagerImpl on the case's LoadData, built without initialize(): its fields get the values
     * initialize() and the leader's updateBundleData give them (the strategies, SimpleResourceAllocationPolicies,
     * the two broker filters, the failure-domain map, each broker's time averages and bundle ranges). Its
     * PulsarService answers from one in-memory metadata store into which the case's {@code "policies"} are written
     * first, as the admin API writes them ({@link #writePolicies}); the cluster is {@value #CLUSTER}. The broker
     * registry lists the case's brokers; the admin client records unload calls into {@code unloadCalls}. Case times
     * are relative to {@code "now"} and are shifted to this JVM's clock.
     */
    static Modular modular(JsonNode testCase, List<String[]> unloadCalls) throws Exception {
        ServiceConfiguration conf = config(testCase.path("config"));
        conf.setClusterName(CLUSTER);
        LoadData given = loadData(testCase);
        long shift = System.currentTimeMillis() - testCase.path("now").asLong(System.currentTimeMillis());
        Modular modular = new Modular();
        ModularLoadManagerImpl manager = new ModularLoadManagerImpl();
        modular.manager = manager;
        LoadData loadData = privateField(manager, "loadData");
        for (String broker : brokerOrder(testCase)) {
            loadData.getBrokerData().put(broker, given.getBrokerData().get(broker));
        }
        loadData.getBundleData().putAll(given.getBundleData());
        given.getRecentlyUnloadedBundles().forEach((bundle, at) ->
                loadData.getRecentlyUnloadedBundles().put(bundle, at + shift));
        modular.store = MetadataStoreExtended.create("memory:local", MetadataStoreConfig.builder().build());
        try {
            build(testCase, modular, loadData, conf, unloadCalls);
        } catch (Exception | LinkageError e) {
            modular.close();
            throw e;
        }
        return modular;
    }

    private static void build(JsonNode testCase, Modular modular, LoadData loadData, ServiceConfiguration conf,
                              List<String[]> unloadCalls) throws Exception {
        ModularLoadManagerImpl manager = modular.manager;
        List<String> brokers = new ArrayList<>(new TreeMap<>(loadData.getBrokerData()).keySet());
        modular.brokers = brokers;
        PulsarResources resources = pulsarResources(modular.store);
        writePolicies(testCase.path("policies"), resources);
        StubServices.Pulsar pulsar = StubServices.broker(conf, StubServices.namespaces(Map.of(), List.of()),
                Map.of(), null);
        modular.pulsar = pulsar;
        StubServices.leader(pulsar, resources, StubServices.admin(unloadCalls));

        ModularLoadManagerStrategy placement = ModularLoadManagerStrategy.create(conf);
        LoadSheddingStrategy shedding;
        if (placement instanceof LoadSheddingStrategy bound) {
            // initialize() binds a placement strategy that also sheds (AvgShedder) to the shedding side.
            if (!conf.getLoadBalancerLoadSheddingStrategy().equals(conf.getLoadBalancerLoadPlacementStrategy())) {
                throw new IllegalArgumentException("The load shedding strategy can't work with the placement one");
            }
            shedding = bound;
        } else {
            shedding = (LoadSheddingStrategy) Class.forName(conf.getLoadBalancerLoadSheddingStrategy())
                    .getDeclaredConstructor().newInstance();
        }
        modular.placement = placement;
        modular.shedding = shedding;
        TieBreak tieBreak = new TieBreak(placement);
        modular.tieBreak = tieBreak;
        StubServices.setField(ModularLoadManagerImpl.class, manager, "pulsar", pulsar);
        if (hasField(manager, "pulsarResources")) { // from 3.1
            StubServices.setField(ModularLoadManagerImpl.class, manager, "pulsarResources",
                    pulsar.getPulsarResources());
        }
        if (hasField(manager, "bundlesCache")) { // before 3.1: the bundle data a lookup of an unseen bundle reads
            StubServices.setField(ModularLoadManagerImpl.class, manager, "bundlesCache",
                    modular.store.getMetadataCache(BundleData.class));
            StubServices.setField(ModularLoadManagerImpl.class, manager, "resourceQuotaCache",
                    modular.store.getMetadataCache(ResourceQuota.class));
        }
        StubServices.setField(ModularLoadManagerImpl.class, manager, "conf", conf);
        // The candidates in name order, as the planner keeps them: Pulsar's HashSet hands them to the round-robin
        // selector of excluded namespaces, and to LeastResourceUsageWithWeight's sum, in hash order.
        StubServices.setField(ModularLoadManagerImpl.class, manager, "brokerCandidateCache", new TreeSet<String>());
        StubServices.setField(ModularLoadManagerImpl.class, manager, "brokersData", registry(brokers));
        StubServices.setField(ModularLoadManagerImpl.class, manager, "placementStrategy", tieBreak);
        StubServices.setField(ModularLoadManagerImpl.class, manager, "policies",
                new SimpleResourceAllocationPolicies(pulsar));
        // initialize() reads the failure domains once (then on every change): the map the anti-affinity filter uses.
        LoadManagerShared.refreshBrokerToFailureDomainMap(pulsar, privateField(manager, "brokerToFailureDomainMap"));
        if (hasField(manager, "sheddingExcludedNamespaceSelectionStrategy")) {
            StubServices.setField(ModularLoadManagerImpl.class, manager, "sheddingExcludedNamespaceSelectionStrategy",
                    new RoundRobinBrokerSelector());
        }
        List<Integer> selected = modular.selected;
        LoadSheddingStrategy counted = new LoadSheddingStrategy() { // counts what the strategy chose
            @Override
            public Multimap<String, String> findBundlesForUnloading(LoadData data, ServiceConfiguration config) {
                Multimap<String, String> chosen = shedding.findBundlesForUnloading(data, config);
                selected.add(chosen.size());
                return chosen;
            }
        };
        if (hasField(manager, "loadSheddingStrategy")) {
            StubServices.setField(ModularLoadManagerImpl.class, manager, "loadSheddingStrategy", counted);
        } else { // before 4.0: a pipeline of one strategy
            List<LoadSheddingStrategy> pipeline = privateField(manager, "loadSheddingPipeline");
            pipeline.add(counted);
        }
        List<Object> filters = privateField(manager, "filterPipeline");
        filters.add(new BrokerLoadManagerClassFilter());
        filters.add(new BrokerVersionFilter());
        // What initialize() and the leader's updateBundleData set: the stats assumed for unseen bundles, each broker's
        // time averages over its reported bundles, and its namespaces' bundle ranges.
        NamespaceBundleStats defaultStats = privateField(manager, "defaultStats");
        defaultStats.msgThroughputIn = ModularLoadManagerImpl.DEFAULT_MESSAGE_THROUGHPUT;
        defaultStats.msgThroughputOut = ModularLoadManagerImpl.DEFAULT_MESSAGE_THROUGHPUT;
        defaultStats.msgRateIn = ModularLoadManagerImpl.DEFAULT_MESSAGE_RATE;
        defaultStats.msgRateOut = ModularLoadManagerImpl.DEFAULT_MESSAGE_RATE;
        for (String broker : brokers) {
            BrokerData brokerData = loadData.getBrokerData().get(broker);
            Set<String> reported = brokerData.getLocalData().getLastStats().keySet();
            TimeAverageBrokerData timeAverage = new TimeAverageBrokerData();
            timeAverage.reset(reported, loadData.getBundleData(), defaultStats);
            brokerData.setTimeAverageData(timeAverage);
            reloadBundleRanges(manager, broker, reported);
        }
    }

    /**
     * The case's policies (the planner's ClusterPolicies JSON: {@code isolation}, {@code failure_domains},
     * {@code anti_affinity_groups}) written into the metadata store through Pulsar's own resource classes, so each
     * lands where, and as, that release's admin API stores it: the isolation policies as one
     * {@code Map<String, NamespaceIsolationDataImpl>} at /admin/clusters/{cluster}/namespaceIsolationPolicies (read
     * back in the case's order), each failure domain as a FailureDomainImpl at
     * /admin/clusters/{cluster}/failureDomain/{name}, each anti-affinity group as the namespace's LocalPolicies at
     * /admin/local-policies/{tenant}/{namespace} (where getNamespaceAntiAffinityGroup reads it).
     */
    static void writePolicies(JsonNode policies, PulsarResources resources) throws Exception {
        JsonNode isolation = policies.path("isolation");
        if (isolation.size() > 0) {
            Map<String, NamespaceIsolationDataImpl> data = MAPPER.convertValue(isolation,
                    new TypeReference<LinkedHashMap<String, NamespaceIsolationDataImpl>>() {
                    });
            data.values().forEach(NamespaceIsolationDataImpl::validate); // as the admin API refuses invalid ones
            resources.getNamespaceResources().getIsolationPolicies().createIsolationData(CLUSTER, data);
        }
        for (Map.Entry<String, JsonNode> e : iterable(policies.path("failure_domains").fields())) {
            FailureDomainImpl domain = MAPPER.treeToValue(e.getValue(), FailureDomainImpl.class);
            resources.getClusterResources().getFailureDomainResources()
                    .setFailureDomainWithCreate(CLUSTER, e.getKey(), old -> domain);
        }
        for (Map.Entry<String, JsonNode> e : iterable(policies.path("anti_affinity_groups").fields())) {
            LocalPolicies local = new LocalPolicies(new LocalPolicies().bundles, null, e.getValue().asText());
            resources.getLocalPolicies().setLocalPoliciesWithCreate(NamespaceName.get(e.getKey()), old -> local);
        }
    }

    /**
     * The configured placement strategy, made deterministic: where it draws its broker at random among equally good
     * ones (LeastLongTermMessageRate, LeastResourceUsageWithWeight: their {@code bestBrokers}), the lowest of them
     * by name is returned instead. AvgShedder as placement draws at random too when it has no planned destination
     * for the bundle among the candidates (the pipeline's filters, isolation policies among them, left it out): the
     * lowest candidate by name is taken there as well, and remembered as AvgShedder remembers its draw
     * ({@code redraws} counts them). Otherwise the strategy's own answer (AvgShedder's planned destination).
     */
    static final class TieBreak implements ModularLoadManagerStrategy {
        private final ModularLoadManagerStrategy strategy;
        private final List<List<String>> ties = new ArrayList<>();
        private int redraws;

        TieBreak(ModularLoadManagerStrategy strategy) {
            this.strategy = strategy;
        }

        @Override
        public Optional<String> selectBroker(Set<String> candidates, BundleData bundle, LoadData loadData,
                                             ServiceConfiguration conf) {
            try {
                if (strategy.getClass().getSimpleName().equals("AvgShedder") && !candidates.isEmpty()
                        && hasField(strategy, "bundleBrokerMap")) {
                    Map<BundleData, String> planned = privateField(strategy, "bundleBrokerMap");
                    String destination = planned.get(bundle);
                    if (destination == null || !candidates.contains(destination)) {
                        redraws++;
                        String lowest = Collections.min(candidates);
                        planned.put(bundle, lowest);
                        return Optional.of(lowest);
                    }
                }
                Optional<String> drawn = strategy.selectBroker(candidates, bundle, loadData, conf);
                if (drawn.isEmpty() || !hasField(strategy, "bestBrokers")) {
                    return drawn;
                }
                List<String> among = new ArrayList<>(privateField(strategy, "bestBrokers"));
                if (among.size() > 1) {
                    ties.add(among);
                }
                return among.isEmpty() ? drawn : Optional.of(Collections.min(among));
            } catch (ReflectiveOperationException error) {
                throw new IllegalStateException(error);
            }
        }

        @Override
        public void onActiveBrokersChange(Set<String> brokers) {
            strategy.onActiveBrokersChange(brokers);
        }
    }

    /** PulsarResources on one metadata store (the constructor's parameter types changed across releases). */
    private static PulsarResources pulsarResources(MetadataStoreExtended store) throws Exception {
        for (Constructor<?> constructor : PulsarResources.class.getConstructors()) {
            if (constructor.getParameterCount() == 2) {
                return (PulsarResources) constructor.newInstance(store, store);
            }
        }
        throw new IllegalStateException("no PulsarResources(local, configuration) constructor");
    }

    /** The broker registry (the lock manager on /loadbalance/brokers): it lists the given brokers. */
    @SuppressWarnings("unchecked")
    private static LockManager<LocalBrokerData> registry(List<String> brokers) {
        return (LockManager<LocalBrokerData>) Proxy.newProxyInstance(Harness.class.getClassLoader(),
                new Class<?>[]{LockManager.class}, (proxy, method, args) -> {
                    if (method.getName().equals("listLocks")) {
                        return CompletableFuture.completedFuture(new ArrayList<>(brokers));
                    }
                    throw new UnsupportedOperationException(method.getName());
                });
    }

    /**
     * The broker's namespaces and bundle ranges, as updateBundleData records them from its last report (4.0 keeps
     * them in a BundleRangeCache, 3.x in nested ConcurrentOpenHashMaps filled by LoadManagerShared).
     */
    private static void reloadBundleRanges(ModularLoadManagerImpl manager, String broker, Set<String> bundles)
            throws Exception {
        Object ranges = privateField(manager, "brokerToNamespaceToBundleRange");
        for (Method method : ranges.getClass().getMethods()) {
            if (method.getName().equals("reloadFromBundles")) {
                method.invoke(ranges, broker, bundles.stream());
                return;
            }
        }
        Object builder = ranges.getClass().getMethod("newBuilder").invoke(null);
        Object namespaces = builder.getClass().getMethod("build").invoke(builder);
        ranges.getClass().getMethod("put", Object.class, Object.class).invoke(ranges, broker, namespaces);
        for (Method method : LoadManagerShared.class.getMethods()) {
            if (method.getName().equals("fillNamespaceToBundlesMap")) {
                method.invoke(null, bundles, namespaces);
                return;
            }
        }
        throw new IllegalStateException("no way to record the broker's bundle ranges");
    }

    // --- helpers ----------------------------------------------------------------------------------------------

    private static <T> Iterable<T> iterable(Iterator<T> iterator) {
        return () -> iterator;
    }

    @SuppressWarnings("unchecked")
    private static <T> T privateField(Object target, String name) throws ReflectiveOperationException {
        Field field = target.getClass().getDeclaredField(name);
        field.setAccessible(true);
        return (T) field.get(target);
    }

    private static boolean hasField(Object target, String name) {
        return Arrays.stream(target.getClass().getDeclaredFields()).anyMatch(field -> field.getName().equals(name));
    }
}
